"""``kvplan tune``'s flags, declared once: its own (:data:`TUNE_FLAGS`), the serve flags it reads as
lists of values to search (:data:`SPACE_OVERRIDES`: the space) and the traffic flags it takes. The CLI
declares its options from these tables at start-up (only the standard library here); what they
become is :class:`kvplan.tune.run.TuneOptions`.
"""
from __future__ import annotations

from ..flags import Flag

#: ``kvplan tune``'s own flags (the report's format and file are the CLI's)
TUNE_FLAGS: tuple[Flag, ...] = (
    Flag("gpus", ("--gpus",), str, None,
         "GPU counts to try, e.g. 4,8 (TP × PP × DP = GPUs), or auto: per GPU type the fewest replicas that carry "
         "--rate [default: TP × PP × DP of the base]."),
    Flag("max_gpus", ("--max-gpus",), int, 128, "With --gpus auto: the most GPUs a fleet may take."),
    Flag("gpu_price", ("--gpu-price",), str, None, "USD per GPU-hour, e.g. A100-80GB=1.8,H100=2.5, or a JSON file "
         "[default: the shipped on-demand list, dated and sourced]."),
    Flag("profile", ("--profile",), str, None, "A step-time profile from `kvplan calibrate`."),
    Flag("coverage", ("--coverage",), float, None, "max_model_len must hold this percentile of prompt + output "
         "(default: all requests; 99.9 with --requests)."),
    Flag("slo", ("--slo",), str, None, "e.g. ttft_p99=2s,tpot_p99=100ms"),
    Flag("objective", ("--objective",), str, None, "goodput_per_gpu or min_gpus; with --gpus auto min_gpus, "
         "min_cost or capacity_per_gpu [goodput_per_gpu; min_gpus with --gpus auto]."),
    Flag("exhaustive", ("--exhaustive",), bool, False, "Simulate every configuration, also those with more GPUs "
         "than can beat the winner (full ranking and Pareto front)."),
    Flag("no_reuse", ("--no-reuse",), bool, False, "Simulate every configuration, also those a simulated run "
         "provably stands for (max_num_seqs / KV blocks it never reached)."),
    Flag("all_replicas", ("--all-replicas",), bool, False, "With DP: simulate every replica's share, not one "
         "(percentiles over the whole trace; DP times the work)."),
    Flag("processes", ("--processes",), int, None, "Parallel simulations (default: CPU count)."),
    Flag("ray_address", ("--ray-address",), str, None, "Run on this Ray cluster ('local': a private one)."),
)

#: the serve flags tune reads its own way (type, help, extra names): lists of values to search (the
#: space), and the ones that describe the base configuration only
SPACE_OVERRIDES = {
    "gpu": (str, "GPU type(s) from the catalog, comma-separated (e.g. A100-80GB,H100)."),
    "gpu_memory": (str, "Total memory of one GPU (a custom GPU; no roofline without --profile)."),
    "tensor_parallel_size": (str, "TP sizes, e.g. 1,2,4,8 (default: the powers of two dividing --gpus).", "--tp"),
    "data_parallel_size": (int, "Without --gpus: the replicas of every TP."),
    "kv_cache_dtype": (str, "e.g. auto,fp8 (the plan's rule for fp8 on each GPU and vLLM version) [default: "
                       "auto,fp8]."),
    "gpu_memory_utilization": (str, "[default: 0.9,0.95]"),
    "max_model_len": (str, "e.g. 4K,8K; default: what the workload needs."),
    "max_num_seqs": (str, "e.g. 32,64,256 ('default' = vLLM's) [default: 64,128,256]."),
    "max_num_batched_tokens": (str, "e.g. 2048,8192 ('default' = vLLM's) [default: vLLM's]."),
    "kv_cache_memory": (str, "Measured KV memory per GPU (base GPU/TP/utilization only)."),
    "kv_cache_memory_bytes": (str, "vLLM's flag: exact KV bytes per GPU (base only)."),
    "num_gpu_blocks_override": (int, "(base GPU/TP/utilization only)"),
}

#: the space's flags: lists of values, never the base request's as given
SPACE = ("gpu", "tensor_parallel_size", "kv_cache_dtype", "gpu_memory_utilization", "max_model_len", "max_num_seqs",
          "max_num_batched_tokens")


#: the traffic flags tune does not take (a scenario and a pasted server: tune searches the server)
NOT_TRAFFIC = ("warm_prompts", "warm_prompt_len", "from_serve_cmd")



#: tune's own help for a traffic flag whose meaning it widens
TRAFFIC_OVERRIDES = {"rate": (float, "Requests per second offered to the whole deployment.")}
