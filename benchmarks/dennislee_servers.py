"""Which server served each dennislee22/vLLM-benchmarking run, and when: distilled from the
README's quoted server logs (the first `(APIServer pid=N) INFO MM-DD HH:MM:SS ... Prefix cache
hit rate` line after each run's command). gpu_fidelity.py uses it to find the run the same
server served just before a case (same APIServer pid, same day, the latest earlier time): that
run's prompts are in the prefix cache (benchmark_serving's default seed 0 re-sends them).

    git clone https://github.com/dennislee22/vLLM-benchmarking   # commit b474d1e (the dev set's)
    python benchmarks/dennislee_servers.py vLLM-benchmarking/README.md > benchmarks/data/dennislee_servers.json

The README is the dev set's cited source (the repository names no licence); only these facts
(pid, log time, logged hit rate, README line) are kept, and only the benchmarks read them.
"""
from __future__ import annotations

import json
import re
import sys
from pathlib import Path

DEV_CASES = Path("/work/shared/perf/dev_cases.json")
LINE = re.compile(r"APIServer pid=(\d+)\) INFO (\d\d-\d\d) (\d\d:\d\d:\d\d).*Prefix cache hit rate: ([\d.]+)%")


def main(readme: str) -> int:
    lines = Path(readme).read_text(encoding="utf-8").splitlines()
    out = {}
    for c in json.loads(DEV_CASES.read_text(encoding="utf-8")):
        if not c["id"].startswith("dennislee"):
            continue
        start = int(re.search(r"#L(\d+)", c["source"]["url"]).group(1))
        for j in range(start, min(start + 60, len(lines))):
            m = LINE.search(lines[j])
            if m:
                out[c["id"]] = {"server_pid": int(m.group(1)), "day": m.group(2), "time": m.group(3),
                                "logged_prefix_cache_hit_rate": float(m.group(4)) / 100, "readme_line": j + 1}
                break
    json.dump(out, sys.stdout, indent=1)
    print()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
