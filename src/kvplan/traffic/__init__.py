"""Traffic, as the simulator and the load generator both send it: arrival times (``arrivals``),
token-length distributions (``lengthdist``), vLLM bench's own draws (``bench_traffic``, ``sharegpt``),
pasted ``vllm bench serve`` / ``vllm serve`` lines (``bench_cmd``), and the simulator's traces
(``trace``, ``logtrace``: synthetic, vLLM bench's, or a request log replayed)."""
