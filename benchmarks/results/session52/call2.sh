#!/usr/bin/env bash
# The fifty-second session's second call: the whole micro suite on main with Liger carried, by
# the fiftieth session's script for it, unchanged (it ran on an 80 GB H100; no H200 came).
#   run(command="bash benchmarks/results/session52/call2.sh", carry=[".whl"], timeout_s=598)
exec bash "$(dirname "$0")/../session50/next_session_micro.sh"
