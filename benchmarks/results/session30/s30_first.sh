#!/usr/bin/env bash
# Thirtieth session, first call: the twenty-ninth session's next_session.sh as it was left
# (the register stores' GPU numerics and their ablation at GPT-2's shapes).
exec bash "$(dirname "$0")/../session29/next_session.sh"
