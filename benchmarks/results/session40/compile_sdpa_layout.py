"""What layouts does torch.compile's GPT-2 step hand cuDNN's attention? Compiles a one-layer HF
GPT-2 forward + backward with Inductor's output code logged and prints the lines that call the
attention kernels (their `reinterpret_tensor` views carry the strides)."""

import logging
import re

import torch
import torch._logging
import transformers

torch._logging.set_logs(output_code=True)
records = []


class Keep(logging.Handler):
    def emit(self, record):
        records.append(record.getMessage())


logging.getLogger("torch._inductor").addHandler(Keep())
config = transformers.GPT2Config(n_layer=1, attn_implementation="sdpa")
model = transformers.GPT2LMHeadModel(config).to("cuda", torch.bfloat16).train()
compiled = torch.compile(model)
ids = torch.randint(0, config.vocab_size, (16, 1024), device="cuda")
loss = compiled(input_ids=ids, labels=ids).loss
loss.backward()
torch.cuda.synchronize()
text = "\n".join(records)
lines = text.splitlines()
for i, line in enumerate(lines):
    if re.search(r"scaled_dot_product|cudnn_attention|flash_attention|efficient_attention", line):
        print("\n".join(lines[max(0, i - 2):i + 3]))
        print("----")
