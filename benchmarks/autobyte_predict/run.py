"""CPU time of one AutoByte prediction over every candidate ⟨S_p, S_c⟩ (issue target: < 5 ms
on one core). The meta-network's weights do not change its cost, so an untrained network
of the shipped shape (offline.CONFIG, offline.MEMBERS networks averaged) is timed; what
matters is the candidate count and the model's layer count.

    python benchmarks/autobyte_predict/run.py
"""

from __future__ import annotations

import statistics
import time

from gradwire.tune import grid, offline
from gradwire.tune.autobyte import AutoByte, NetConfig, Observation
from gradwire.tune.space import MB


def main() -> None:
    shipped = AutoByte(seed=0, config=offline.CONFIG, members=offline.MEMBERS)
    plain = AutoByte(seed=0, config=NetConfig())  # the network before slots and 128 dense units
    rows = []
    for layers, workers in (
        (54, 8),
        (161, 8),
        (16, 32),
    ):  # ResNet50-, ResNet152-, VGG16-like
        obs = Observation.uniform(layers, workers, "resnet50", "ps")
        for cands in (
            grid(),
            grid(max_partition_bytes=64 * MB, max_credit_multiple=16),
        ):
            # side by side, interleaved, so that the machine's load hits both alike
            times: dict[str, list[float]] = {"shipped": [], "plain": []}
            for i in range(55):
                for name, ab in (("shipped", shipped), ("plain", plain)):
                    t0 = time.process_time()
                    ab.predict(obs, cands)
                    if i >= 5:  # the first ones warm up
                        times[name].append((time.process_time() - t0) * 1e3)
            med = {k: statistics.median(v) for k, v in times.items()}
            rows.append((layers, workers, len(cands), med["shipped"], max(times["shipped"]), med["plain"]))
    print(
        f"{'layers':>6} {'workers':>7} {'candidates':>10} {'median ms':>9} {'max ms':>7} {'plain ms':>8} {'ratio':>5}"
    )
    for r in rows:
        print(f"{r[0]:>6} {r[1]:>7} {r[2]:>10} {r[3]:>9.2f} {r[4]:>7.2f} {r[5]:>8.2f} {r[3] / r[5]:>5.2f}")
    worst = max(r[3] for r in rows)
    print(f"worst median {worst:.2f} ms CPU per prediction: {'meets' if worst < 5 else 'misses'} the 5 ms target")


if __name__ == "__main__":
    main()
