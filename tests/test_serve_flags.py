"""The serve flags are one table (kvplan/serve_flags.py): every front end that plans takes every flag
in it, under the same names, read the same way: the commands (plan, simulate, tune, calibrate,
preflight, and profile's pass-through flags), a ``preflight --config`` file, the page, and a pasted
``vllm serve`` line; and the request every one of them builds holds the flag's value."""
from __future__ import annotations

import shlex

import pytest

from kvplan import serve_flags as sf
from kvplan.errors import UsageError

#: a value of each type as text, and as the flag reads it
SAMPLE = {int: ("3", 3), float: ("0.5", 0.5), str: ("x-y", "x-y")}

#: the commands whose options are the table's (typer, in this process)
COMMANDS = ("plan", "simulate", "tune", "calibrate", "preflight")

#: fields read by a rule of their own (the model is loaded, the GPU looked up, sizes parsed, ...)
RULED = sf._RULED


def sample_argv(flag: sf.ServeFlag, positive: bool = True) -> tuple[list[str], object]:
    if flag.type is bool:
        return ([flag.flag] if positive else [flag.negative]), positive
    text, value = (flag.choices[-1], flag.choices[-1]) if flag.choices else SAMPLE[flag.type]
    return [flag.flag, text], value


def cli_command(command: str):
    import typer.main

    from kvplan.cli.main import app

    return typer.main.get_command(app).commands[command]


def cli_params(command: str) -> dict:
    return {p.name: p for p in cli_command(command).params}


def test_the_table_names_each_flag_once():
    names = [n for f in sf.SERVE_FLAGS for n in f.all_names()]
    assert len(names) == len(set(names))
    assert len(sf.FIELDS) == len(set(sf.FIELDS))
    for f in sf.SERVE_FLAGS:
        assert f.flag == "--" + f.field.replace("_", "-"), "the long name is vLLM's: the field with dashes"
        assert f.type in (int, float, str, bool)
        assert f.help.strip()


def test_every_field_is_a_field_of_the_plan_request():
    import dataclasses

    from kvplan.memory import PlanRequest

    fields = {f.name for f in dataclasses.fields(PlanRequest)}
    missing = [f.field for f in sf.SERVE_FLAGS if f.field not in fields and f.field not in
               ("gpu", "gpu_memory", "kv_cache_memory", "host_memory")]  # read into gpu, *_bytes
    assert missing == []


@pytest.mark.parametrize("command", COMMANDS)
def test_every_command_that_plans_takes_every_flag_under_the_same_names(command):
    params = cli_params(command)
    for f in sf.SERVE_FLAGS:
        assert f.field in params, f"{command} lacks {f.flag}"
        p = params[f.field]
        spellings = set(p.opts) | set(getattr(p, "secondary_opts", ()))
        assert set(f.all_names()) <= spellings, (command, f.flag, spellings)


@pytest.mark.parametrize("command", [c for c in COMMANDS if c != "tune"])
def test_every_command_reads_every_flag_as_the_table_does(command):
    """click's reading of each flag (its type, its negative form) is the table's own."""
    cmd = cli_command(command)
    required = ["inputs/run.json"] if command == "calibrate" else []
    for f in sf.SERVE_FLAGS:
        for positive in ((True, False) if f.type is bool else (True,)):
            argv, value = sample_argv(f, positive)
            ctx = cmd.make_context(command, [*required, *argv])
            assert ctx.params[f.field] == value, (command, argv)
            assert sf.parse_argv(argv)[0] == {f.field: value}


def test_tune_takes_lists_of_the_space_flags_and_single_values_of_the_rest():
    cmd = cli_command("tune")
    ctx = cmd.make_context("tune", ["--max-num-seqs", "64,128", "-tp", "1,2", "--block-size", "32", "--enforce-eager"])
    assert ctx.params["max_num_seqs"] == "64,128" and ctx.params["tensor_parallel_size"] == "1,2"
    assert ctx.params["block_size"] == 32 and ctx.params["enforce_eager"] is True


def test_the_request_holds_every_plain_flag_from_every_front_end(tmp_path):
    """A flag without a rule of its own reaches the request unchanged, from argv (profile, the
    page), a config file and a pasted vllm serve line alike."""
    from kvplan.preflight.config import load_config
    from kvplan.traffic.bench_cmd import parse_serve_cmd

    base = {"model": "llama3-8b", "gpu": "H100"}
    for f in sf.SERVE_FLAGS:
        if f.field in RULED:
            continue
        argv, value = sample_argv(f)
        values, _ = sf.parse_argv(["--model", "llama3-8b", "--gpu", "H100", *argv])
        assert getattr(sf.request_from_values(values), f.field) == value, f.flag
        cfg = tmp_path / f"{f.field}.yaml"
        cfg.write_text(f"model: llama3-8b\ngpu: H100\n{f.field.replace('_', '-')}: "
                       f"{'true' if f.type is bool else argv[1]}\n")
        from_file = sf.values_of(load_config(cfg))
        assert getattr(sf.request_from_values(from_file), f.field) == value, f.flag
        ps = parse_serve_cmd(shlex.join(["vllm", "serve", "llama3-8b", *argv]))
        assert getattr(sf.request_from_values({**base, **ps.plan}), f.field) == value, f.flag


def test_every_flag_round_trips_through_a_vllm_serve_line():
    from kvplan.traffic.bench_cmd import parse_serve_cmd

    values = {f.field: (True if f.type is bool else SAMPLE[f.type][1]) for f in sf.SERVE_FLAGS
              if f.vllm and f.field != "model"}
    values.update(enforce_eager=False, enable_prefix_caching=False)
    argv = sf.serve_argv(values, model="org/m")
    assert "--no-enable-prefix-caching" in argv and "--no-enforce-eager" in argv
    assert parse_serve_cmd(shlex.join(argv)).plan == {**values, "model": "org/m"}
    # kvplan's own words (--gpu, --vllm-version, ...) are no vllm serve flags: never written
    assert sf.serve_argv({"gpu": "H100", "vllm_version": "0.10", "max_num_seqs": 8}, model="m") == \
        ["vllm", "serve", "m", "--max-num-seqs", "8"]


def test_the_serve_parser_knows_no_flag_twice():
    from kvplan.traffic import bench_cmd

    table = set(sf.BY_NAME)
    for other in (bench_cmd._SERVE_IGNORED, bench_cmd._SERVE_UNSUPPORTED):
        assert not table & set(other), "a flag in the table is read, not ignored: take it out of bench_cmd.py"


def test_kvplans_own_words_are_never_abbreviated_in_a_pasted_line():
    """vLLM's argparse takes unambiguous prefixes of its flags; --gpu-mem is --gpu-memory-utilization
    there, whatever kvplan's --gpu-memory is."""
    from kvplan.traffic.bench_cmd import parse_serve_cmd

    assert parse_serve_cmd("vllm serve m --gpu-mem 0.8").plan == {"model": "m", "gpu_memory_utilization": 0.8}


def test_a_config_file_takes_every_flag():
    from kvplan.preflight.config import PLAN_KEYS

    assert set(PLAN_KEYS) == set(sf.FIELDS)


#: serve flags the page refuses: --speculative-config's "model" names a config the server would load
NOT_FROM_THE_PAGE = {"speculative_config"}


@pytest.mark.parametrize("command", ["plan", "simulate"])
def test_the_page_may_send_every_flag_but_those_naming_a_server_file(command):
    from kvplan.ui import api

    uploads = api.Uploads()
    try:
        for f in sf.SERVE_FLAGS:
            for positive in ((True, False) if f.type is bool else (True,)):
                argv, _ = sample_argv(f, positive)
                if f.field == "model":
                    argv = ["--model", "llama3-8b"]
                if f.field in NOT_FROM_THE_PAGE:
                    with pytest.raises(UsageError, match="not a flag the page can set"):
                        api.vet_argv(command, argv, uploads)
                    continue
                assert api.vet_argv(command, argv, uploads) == argv
    finally:
        uploads.close()


def test_argv_errors_name_the_flag():
    with pytest.raises(UsageError, match="unknown flag.s.: --max-num-seq$"):
        sf.parse_argv(["--max-num-seq", "4"])  # no abbreviations: kvplan's flags are spelled out
    with pytest.raises(UsageError, match="--tensor-parallel-size: cannot read 'two' as a number"):
        sf.parse_argv(["-tp", "two"])
    with pytest.raises(UsageError, match="--block-size needs a value"):
        sf.parse_argv(["--block-size"])
    with pytest.raises(UsageError, match="--enforce-eager takes no value"):
        sf.parse_argv(["--enforce-eager=1"])
    assert sf.parse_argv(["--max-model-len=8k", "--from-log", "x.log", "--no-enforce-eager"]) == \
        ({"max_model_len": "8k", "enforce_eager": False}, "x.log")


def test_the_table_imports_no_front_end():
    """The table sits below the front ends: importing it loads neither typer nor click (``kvplan
    plan`` pays for the table's declarations only)."""
    import subprocess
    import sys

    code = "import sys, kvplan.serve_flags; print(sorted(m for m in sys.modules if m.split('.')[0] in ('typer', 'click')))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"
