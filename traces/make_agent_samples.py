#!/usr/bin/env python3
"""Writes the two synthetic agent-trace samples of traces/ (deterministic: fixed seed).

swe_agent_sample.csv: the shape of a SWE-bench agent trace, 30 sessions of sequential
  calls spread over about 4.5 days (sessions start in bursts, with idle hours between),
  prompts growing by each call's output and a tool result, and errored calls logged with
  0 tokens (`is_error = true`), and the harness's `tool_definitions_chars`: the characters
  of tool definitions every call of a session repeats (11,236 for the one harness most
  sessions run, 6,918 for the two sessions of a lighter one, 0 on errored calls, whose
  request was never sent), as agent harnesses record them.
coding_assistant_sample.jsonl: the shape of a coding-assistant trace, 21 conversations
  over 13 days, prompts from 20k up to about 850k tokens (whole repositories in context).

Neither is a recording: the numbers are drawn here to reproduce the two shapes.
Run: python3 traces/make_agent_samples.py (from the repository root).
"""
import json
import random

rng = random.Random(20261205)
T0 = 1_760_000_000.0  # unix seconds of the first call


def swe():
    rows = []
    day_starts = [T0 + d * 86400.0 for d in range(5)]
    for s in range(30):
        # Six sessions per day, started within a 3-hour working window.
        start = day_starts[s // 6] + rng.uniform(0, 3 * 3600)
        prompt = rng.randint(3000, 6000)
        # Two sessions run a lighter harness with fewer tools (no draw: the other columns
        # stay as they were before this column was added).
        tools = 6918 if s in (7, 22) else 11236
        t = start
        for step in range(rng.randint(12, 28)):
            error = rng.random() < 0.04
            out = rng.randint(60, 900)
            latency = round(0.4 + out * 0.012 + prompt / 40000, 3)
            rows.append(
                (f"swe-{s:03d}", step, round(t, 3), 0.05 if error else latency,
                 0 if error else prompt, 0 if error else out, "true" if error else "false",
                 0 if error else tools)
            )
            if not error:
                prompt += out + rng.randint(200, 2500)
            # Think time: the tool runs (tests, greps) before the next call.
            t += (0.05 if error else latency) + rng.expovariate(1 / 8.0)
    rows.sort(key=lambda r: r[2])
    with open("traces/swe_agent_sample.csv", "w") as f:
        f.write("session_id,step,start_unix_s,latency_s,prompt_tokens,completion_tokens,is_error,"
                "tool_definitions_chars\n")
        for r in rows:
            f.write(",".join(str(x) for x in r) + "\n")


def assistant():
    rows = []
    for c in range(21):
        t = T0 + rng.uniform(0, 13 * 86400 - 4 * 3600)
        prompt = rng.randint(20_000, 120_000)
        big = c % 4 == 0  # a whole repository pasted in
        for _ in range(rng.randint(6, 18)):
            out = rng.randint(100, 3000)
            latency = round(1.0 + out * 0.015 + prompt / 20000, 3)
            rows.append({"conversation": f"conv-{c:02d}", "ts": round(t, 3), "duration_s": latency,
                         "input_tokens": prompt, "output_tokens": out, "model": "coder-large"})
            grow = rng.randint(30_000, 120_000) if big else rng.randint(500, 6000)
            prompt = min(848_000, prompt + out + grow)
            t += latency + rng.expovariate(1 / 45.0)
    rows.sort(key=lambda r: r["ts"])
    with open("traces/coding_assistant_sample.jsonl", "w") as f:
        for r in rows:
            f.write(json.dumps(r) + "\n")


swe()
assistant()
