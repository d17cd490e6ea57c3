"""GPT-2 loss curves (200 steps, train.py's curve setup) for more seeds: eager and CODA, same
init and batches per seed. Does CODA take loss spikes more often than eager?"""
import json, os, sys, time
sys.path.insert(0, "benchmarks"); sys.path.insert(0, "src")
import importlib.util
spec = importlib.util.spec_from_file_location("train", "benchmarks/train.py")
train = importlib.util.module_from_spec(spec); spec.loader.exec_module(train)
import torch
from coda.train import batch as text_batch, learning_rate, load_corpus
out = {}
data = load_corpus()
device, dtype = torch.device("cuda"), torch.bfloat16
bs, seq = train.SHAPES["gpt2"]
t0 = time.time()
for seed in (1, 2, 3, 4, 5):
    train.SEED = seed
    for mode in ("eager", "coda"):
        if time.time() - t0 > 150: break
        model = train.build("gpt2", False, device, dtype)
        step_model = train.prepare(model, mode)
        opt = torch.optim.AdamW(model.parameters(), lr=train.LR, fused=True)
        gen = torch.Generator().manual_seed(seed)
        run = []
        for i in range(200):
            for g in opt.param_groups: g["lr"] = learning_rate(i, 200, train.LR)
            ids, _ = text_batch(data, bs, seq, gen, torch.device("cpu"))
            loss = step_model(**train.model_inputs("gpt2", ids, model.config.vocab_size, gen, device)).loss
            loss.backward(); opt.step(); opt.zero_grad(set_to_none=True)
            run.append(loss.detach())
        out.setdefault(str(seed), {})[mode] = torch.stack(run).float().tolist()
        l = out[str(seed)][mode]
        print(f"seed {seed} {mode:6s} last-50 mean {sum(l[-50:])/50:.4f} max {max(l[20:]):.3f} at {l.index(max(l[20:]))}  t={time.time()-t0:.0f}s", flush=True)
        del model, step_model, opt; torch.cuda.empty_cache()
        json.dump(out, open(os.environ["OUT"] + "/seeds.json", "w"))
