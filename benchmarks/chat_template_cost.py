"""vLLM 0.11's per-request chat-template parse, timed: ``resolve_chat_template_kwargs``
(``vllm/entrypoints/chat_utils.py`` in the 0.11.0 wheel) builds a new Jinja sandbox environment,
parses the model's whole chat template and walks it for its undeclared variables on every chat
request, before the template is rendered (0.10.2 has no such step; 0.12.0 caches it with
``lru_cache``). The CPU time grows with the template's length: this script times it on the
repository's test templates (tests/workload_helpers.py: a ChatML template with tools, Llama-3's
without, each also doubled) and prints the CPU seconds per template character that
``kvplan.sim.opmodel.Overheads.api_chat_parse_s_per_char`` carries.

    flock /work/wt/heavy.lock .venv/bin/python benchmarks/chat_template_cost.py [--json out.json]

CPU time (``time.process_time``), the least of several rounds: a shared host's load changes the
wall time more than the work. How it carries to a GPU host: with the API server's other costs, by
the fitted ``api_cpu_speed`` (benchmarks/frontend_cost.py).
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests"))


def parse_cost(template: str, repeats: int = 50, rounds: int = 5) -> float:
    """CPU seconds of one ``resolve_chat_template_kwargs`` as in vLLM 0.11.0 (the environment with
    its ``{% generation %}`` extension and loopcontrols, parse, undeclared variables)."""
    import jinja2
    import jinja2.ext
    import jinja2.meta
    import jinja2.sandbox

    class AssistantTracker(jinja2.ext.Extension):  # vLLM's: a {% generation %} block tag
        tags = {"generation"}

        def parse(self, parser):
            lineno = next(parser.stream).lineno
            body = parser.parse_statements(["name:endgeneration"], drop_needle=True)
            return jinja2.nodes.CallBlock(self.call_method("_generation_support"), [], [], body).set_lineno(lineno)

    best = float("inf")
    for _ in range(rounds):
        t0 = time.process_time()
        for _ in range(repeats):
            env = jinja2.sandbox.ImmutableSandboxedEnvironment(
                trim_blocks=True, lstrip_blocks=True, extensions=[AssistantTracker, jinja2.ext.loopcontrols])
            jinja2.meta.find_undeclared_variables(env.parse(template))
        best = min(best, (time.process_time() - t0) / repeats)
    return best


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", type=Path)
    args = ap.parse_args(argv)
    from workload_helpers import CHATML_TOOLS, LLAMA3

    rows = []
    for name, text in (("chatml_tools", CHATML_TOOLS), ("llama3", LLAMA3), ("chatml_tools x2", CHATML_TOOLS * 2),
                       ("llama3 x2", LLAMA3 * 2)):
        s = parse_cost(text)
        rows.append({"template": name, "chars": len(text), "cpu_s": s, "cpu_s_per_char": s / len(text)})
        print(f"{name:<18} {len(text):>6} chars  {s * 1e3:7.2f} ms CPU  {s / len(text) * 1e6:5.2f} us/char", flush=True)
    # least squares through the origin: CPU seconds per character
    per_char = sum(r["cpu_s"] * r["chars"] for r in rows) / sum(r["chars"] ** 2 for r in rows)
    print(f"per character: {per_char * 1e6:.2f} us CPU (a 4,000-character template: {per_char * 4000 * 1e3:.1f} ms)")
    if args.json:
        import platform

        args.json.write_text(json.dumps({"rows": rows, "cpu_s_per_char": per_char, "python": sys.version.split()[0],
                                         "jinja2": __import__("jinja2").__version__,
                                         "machine": platform.processor() or platform.machine(),
                                         "date": time.strftime("%Y-%m-%d")}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
