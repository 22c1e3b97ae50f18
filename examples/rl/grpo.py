#!/usr/bin/env python3
"""GRPO on single-digit addition ("3 + 4 =", answer with the number only) with invar as the sampler, and a trainer whose logprobs are
bitwise the sampler's (docs/rl.md).

Each step samples a group of completions per prompt with invar (temperature 1, no top-p/k:
the reported logprob is the policy's own), rewards the ones whose first number is the sum,
and takes one policy-gradient step on the group-normalised advantages. The trainer's
logprobs come from invar.trainer.token_logprobs: forward = invar's kernels (so they equal
the sampled logprobs bit for bit: importance ratio exactly 1, sampler/trainer KL exactly 0),
backward = the float torch reference. The new weights go into the live engine each step.

--trainer torch is the negative control: the trainer's forward is the plain torch model (what
most RL stacks do), and the logged mismatch shows what the ratio then carries.

    python examples/rl/grpo.py --steps 20 --out rl-invar.jsonl
    python examples/rl/grpo.py --steps 8 --trainer torch --out rl-torch.jsonl
    python examples/rl/plot.py rl-invar.jsonl rl-torch.jsonl --out docs/rl.png
"""

from __future__ import annotations

import argparse
import json
import random
import re
import sys
import time
from pathlib import Path

import torch

import invar
from invar.trainer import TorchLlama, sync_weights, token_logprobs

REPO = Path(__file__).resolve().parents[2]


SYSTEM = "Answer with the number only."


def task(rng: random.Random) -> "tuple[str, int]":
    a, b = rng.randint(0, 9), rng.randint(0, 9)
    return f"{a} + {b} =", a + b


def reward(text: str, answer: int) -> float:
    """0.5 for starting with a number (the format asked for), 0.5 more if it is the sum."""
    m = re.match(r"\s*(-?\d+)", text)
    if not m:
        return 0.0
    return 1.0 if int(m.group(1)) == answer else 0.5


def f32_bits_equal(a: torch.Tensor, b: torch.Tensor) -> bool:
    return bool(torch.equal(a.float().view(torch.int32), b.float().view(torch.int32)))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default=str(REPO / "models" / "SmolLM2-135M-Instruct.Q4_1.gguf"),
                    help="GGUF model; its weights are dequantised to float32 (or --bf16) for training")
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--prompts", type=int, default=2, help="prompts per step")
    ap.add_argument("--group", type=int, default=8, help="samples per prompt")
    ap.add_argument("--max-tokens", type=int, default=6)
    ap.add_argument("--lr", type=float, default=3e-5)
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--bf16", action="store_true", help="bfloat16 parameters (invar computes with BF16 weights)")
    ap.add_argument("--trainer", choices=("invar", "torch"), default="invar",
                    help="invar: trainer logprobs from invar's forward (bitwise the sampler's); "
                         "torch: from the plain torch model (the negative control)")
    ap.add_argument("--out", default="-", help="JSON lines log (one per step)")
    a = ap.parse_args(argv)

    torch.manual_seed(a.seed)
    if a.threads:
        torch.set_num_threads(a.threads)
    rng = random.Random(a.seed)
    model = TorchLlama.from_gguf(a.model, dtype=torch.bfloat16 if a.bf16 else torch.float32)
    llm = invar.LLM(a.model, threads=a.threads, max_batch=a.prompts * a.group)
    sync_weights(llm, model)  # the sampler starts from the same float weights as the trainer
    opt = torch.optim.Adam(model.parameters(), lr=a.lr, fused=True)  # the fused CPU kernel: ~10x the default's speed
    out = sys.stdout if a.out == "-" else open(a.out, "w")
    seed = a.seed * 1_000_003
    for step in range(a.steps):
        t0 = time.time()
        tasks = [task(rng) for _ in range(a.prompts)]
        chats = [llm.apply_chat_template([{"role": "system", "content": SYSTEM}, {"role": "user", "content": q}],
                                         tokenize=True) for q, _ in tasks]
        prompts = [c for c in chats for _ in range(a.group)]
        params = []
        for _ in prompts:
            seed += 1
            params.append(invar.SamplingParams(temperature=1.0, seed=seed, max_tokens=a.max_tokens))
        outs = [o.outputs[0] for o in llm.generate(prompts, params)]  # one engine batch
        t_sample = time.time() - t0
        rewards = torch.tensor([reward(o.text, tasks[i // a.group][1]) for i, o in enumerate(outs)])
        r = rewards.view(a.prompts, a.group)
        adv = ((r - r.mean(1, keepdim=True)) / (r.std(1, keepdim=True) + 1e-4)).flatten()

        conts = [o.token_ids for o in outs]
        sampler_lp = torch.tensor([x for o in outs for x in o.token_logprobs], dtype=torch.float32)
        t1 = time.time()
        if a.trainer == "invar":
            trainer_lp = token_logprobs(llm, model, prompts, conts)
        else:
            trainer_lp = model.token_logprobs(prompts, conts)
        t_forward = time.time() - t1
        lens = torch.tensor([len(c) for c in conts])
        tok_adv = torch.repeat_interleave(adv, lens)
        log_ratio = trainer_lp - sampler_lp  # exactly 0 with the invar trainer
        ratio = torch.exp(log_ratio)
        loss = -(ratio * tok_adv).sum() / lens.sum()
        opt.zero_grad()
        t1 = time.time()
        loss.backward()
        t_backward = time.time() - t1
        t1 = time.time()
        opt.step()
        t_adam = time.time() - t1
        t1 = time.time()
        sync_weights(llm, model)  # the new policy, live in the sampler
        t_sync = time.time() - t1

        lr_ = log_ratio.detach()
        rec = {
            "step": step, "trainer": a.trainer, "reward": float(rewards.mean()),
            "max_abs_logprob_diff": float(lr_.abs().max()),
            "bitwise_equal": f32_bits_equal(trainer_lp.detach(), sampler_lp),
            "ratio_min": float(ratio.detach().min()), "ratio_max": float(ratio.detach().max()),
            "kl_k1": float((-lr_).mean()), "kl_k3": float((torch.exp(lr_) - 1 - lr_).mean()),
            "loss": float(loss.detach()), "tokens": int(lens.sum()),
            "sample_s": round(t_sample, 2), "trainer_forward_s": round(t_forward, 2),
            "backward_s": round(t_backward, 2), "adam_s": round(t_adam, 2), "sync_s": round(t_sync, 2),
            "step_s": round(time.time() - t0, 2),
        }
        out.write(json.dumps(rec) + "\n")
        out.flush()
        print(f"step {step:3d} reward {rec['reward']:.3f} max|dlp| {rec['max_abs_logprob_diff']:.3g} "
              f"ratio [{rec['ratio_min']:.6f}, {rec['ratio_max']:.6f}] kl {rec['kl_k1']:.3g} "
              f"({rec['step_s']} s)", file=sys.stderr)
    llm.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
