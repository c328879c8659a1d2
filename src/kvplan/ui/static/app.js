// kvplan ui: the page builds the argv of `kvplan plan|simulate|lengths` from its controls, asks the
// server (which answers with the CLI's own --format json), and draws the answer. Every DOM node is
// built with createElement/textContent (never innerHTML with data). State lives in the URL.
"use strict";

const $ = (id) => document.getElementById(id);
const SVG_NS = "http://www.w3.org/2000/svg";
const state = { view: "plan", upload: null, uploadName: null, logUpload: null, logName: null,
                plan: null, planSeq: 0, compare: [], models: [], gpus: [] };

// ---------- small helpers ----------
function el(tag, attrs, ...children) {
  const n = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (k === "class") n.className = v; else if (k.startsWith("on")) n.addEventListener(k.slice(2), v);
    else n.setAttribute(k, v);
  }
  for (const c of children) n.append(c instanceof Node ? c : document.createTextNode(String(c)));
  return n;
}
function svg(tag, attrs, text) {
  const n = document.createElementNS(SVG_NS, tag);
  for (const [k, v] of Object.entries(attrs || {})) n.setAttribute(k, String(v));
  if (text !== undefined) n.textContent = String(text);
  return n;
}
function clear(node) { while (node.firstChild) node.removeChild(node.firstChild); return node; }
const fmtInt = (x) => (x === null || x === undefined) ? "–" : Math.round(x).toLocaleString("en-US");
const fmt = (x, d = 2) => (x === null || x === undefined) ? "–" : Number(x).toLocaleString("en-US", { maximumFractionDigits: d, minimumFractionDigits: d });
function fmtSec(s) {
  if (s === null || s === undefined) return "–";
  return s < 1 ? `${fmt(s * 1000, 1)} ms` : `${fmt(s, 2)} s`;
}
function debounce(fn, ms) { let t = null; return (...a) => { clearTimeout(t); t = setTimeout(() => fn(...a), ms); }; }

function showError(msg) {
  const e = $("error");
  if (!msg) { e.hidden = true; clear(e); return; }
  clear(e).append(el("strong", {}, "Error: "), msg, el("button", { type: "button", class: "close", onclick: () => showError(null) }, "×"));
  e.hidden = false;
}

// `kvplan ui --host ADDR` (not loopback) prints its URL with ?token=...: every API call carries it
const TOKEN = new URLSearchParams(location.search).get("token");
async function api(path, body, raw) {
  const headers = TOKEN ? { "X-Kvplan-Token": TOKEN } : {};
  const opts = body === undefined ? { headers } : { method: "POST", body: raw ? body : JSON.stringify(body),
    headers: { ...headers, "Content-Type": raw ? "application/octet-stream" : "application/json" } };
  let resp;
  for (let attempt = 0; ; attempt++) {  // 429: every job slot is busy; a slot frees within a second or so
    try { resp = await fetch(path, opts); } catch (err) { throw new Error("the kvplan ui server is not answering (is `kvplan ui` still running?)"); }
    if (resp.status !== 429 || attempt >= 20) break;
    await new Promise((done) => setTimeout(done, 250 + 100 * attempt));
  }
  let data = null;
  try { data = await resp.json(); } catch (err) { data = { error: `HTTP ${resp.status}` }; }
  if (!resp.ok) { const e = new Error(data && data.error ? data.error : `HTTP ${resp.status}`); e.status = resp.status; throw e; }
  return data;
}

// ---------- controls -> argv ----------
const PLAN_FIELDS = [ // [element id, flag, url key]
  ["tp", "--tensor-parallel-size", "tp", "1"], ["pp", "--pipeline-parallel-size", "pp", "1"],
  ["dp", "--data-parallel-size", "dp", "1"], ["dtype", "--dtype", "dtype", "auto"],
  ["quantization", "--quantization", "q", ""], ["kv-dtype", "--kv-cache-dtype", "kv", "auto"],
  ["mml", "--max-model-len", "mml", ""], ["mns", "--max-num-seqs", "mns", ""],
  ["mnbt", "--max-num-batched-tokens", "mnbt", ""], ["gmu", "--gpu-memory-utilization", "gmu", ""],
  ["block-size", "--block-size", "bs", ""], ["vllm-version", "--vllm-version", "v", ""],
];
const SIZING_FIELDS = [["size-rate", "srate", "10"], ["size-gpus", "sgpus", "A100-80GB,H100"], ["size-lb", "slb", "vllm"],
  ["size-objective", "sobj", "min_gpus"], ["size-prices", "sprice", ""], ["size-max", "smax", "128"]];
const TRAFFIC_FIELDS = [["rate", "rate", "10"], ["num-prompts", "n", "500"], ["in-len", "in", "1024"],
  ["out-len", "out", "128"], ["max-conc", "mc", ""], ["burst", "burst", ""], ["log-rate", "lrate", ""],
  ["slo-ttft", "sttft", ""], ["slo-tpot", "stpot", ""], ["slo-e2e", "se2e", ""]];

function modelArg() { return state.upload && $("model").value === state.uploadName ? state.upload : $("model").value.trim(); }

function planArgv() {
  const argv = ["--model", modelArg()];
  const gpu = $("gpu").value;
  if (gpu === "__custom__") argv.push("--gpu-memory", $("gpu-memory").value.trim());
  else argv.push("--gpu", gpu);
  for (const [id, flag, , dflt] of PLAN_FIELDS) {
    const v = $(id).value.trim();
    if (v !== "" && v !== dflt) argv.push(flag, v);
  }
  return argv;
}

function sloText() {
  const parts = [];
  if ($("slo-ttft").value) parts.push(`ttft_p99=${$("slo-ttft").value}ms`);
  if ($("slo-tpot").value) parts.push(`tpot_p99=${$("slo-tpot").value}ms`);
  if ($("slo-e2e").value) parts.push(`e2e_p99=${$("slo-e2e").value}s`);
  return parts.join(",");
}

function simArgv() {
  const argv = planArgv();
  if (document.querySelector("input[name=wl]:checked").value === "log") {
    if (!state.logUpload) throw new Error("drop a request log on the page first (or pick one with the file button)");
    argv.push("--requests", state.logUpload);
    if ($("log-rate").value.trim()) argv.push("--rate", $("log-rate").value.trim());
  } else {
    argv.push("--request-rate", $("rate").value.trim() || "inf", "--num-prompts", $("num-prompts").value || "500",
              "--random-input-len", $("in-len").value || "1024", "--random-output-len", $("out-len").value || "128");
    if ($("max-conc").value) argv.push("--max-concurrency", $("max-conc").value);
    if ($("burst").value) argv.push("--burstiness", $("burst").value);
  }
  const slo = sloText();
  if (slo) argv.push("--slo", slo);
  return argv;
}

// the sizing view: the Traffic tab's lengths (or log) and SLO, the left panel's model and flags, DP derived
function sizeArgv() {
  const argv = ["--model", modelArg(), "--gpu", $("size-gpus").value.trim(), "--gpus", "auto",
                "--rate", $("size-rate").value.trim() || "1", "--load-balancer", $("size-lb").value,
                "--objective", $("size-objective").value, "--max-gpus", $("size-max").value || "128"];
  for (const [id, flag] of [["dtype", "--dtype"], ["quantization", "--quantization"], ["kv-dtype", "--kv-cache-dtype"],
                            ["mml", "--max-model-len"], ["mns", "--max-num-seqs"], ["mnbt", "--max-num-batched-tokens"],
                            ["gmu", "--gpu-memory-utilization"], ["vllm-version", "--vllm-version"]]) {
    if ($(id).value && !(id === "dtype" && $(id).value === "auto")) argv.push(flag, $(id).value);
  }
  if (!$("mns").value) argv.push("--max-num-seqs", "default");
  if (!$("gmu").value) argv.push("--gpu-memory-utilization", "0.9");
  if (document.querySelector("input[name=wl]:checked").value === "log" && state.logUpload) {
    argv.push("--requests", state.logUpload);
  } else {
    argv.push("--input-len", $("in-len").value || "1024", "--output-len", $("out-len").value || "128");
  }
  if ($("size-prices").value.trim()) argv.push("--gpu-price", $("size-prices").value.trim());
  const slo = sloText();
  if (slo) argv.push("--slo", slo);
  return argv;
}

function shellQuote(a) { return /^[A-Za-z0-9_./:=,@%+-]+$/.test(a) ? a : `'${a.replace(/'/g, "'\\''")}'`; }
function cliLine(cmd, argv) {
  const shown = argv.map((a) => a === state.upload ? (state.uploadName || "config.json") : a === state.logUpload ? (state.logName || "requests.jsonl") : a);
  return `kvplan ${cmd} ${shown.map(shellQuote).join(" ")}`;
}

// ---------- URL state ----------
function saveUrl() {
  const p = new URLSearchParams();
  if (TOKEN) p.set("token", TOKEN);  // a shared link opens the page for a teammate, as the printed URL does
  p.set("view", state.view);
  if ($("model").value) p.set("model", $("model").value);
  if (state.upload && $("model").value === state.uploadName) p.set("upload", state.upload);
  p.set("gpu", $("gpu").value);
  if ($("gpu").value === "__custom__") p.set("mem", $("gpu-memory").value);
  for (const [id, , key, dflt] of PLAN_FIELDS) if ($(id).value !== "" && $(id).value !== dflt) p.set(key, $(id).value);
  const wl = document.querySelector("input[name=wl]:checked").value;
  if (wl !== "bench") p.set("wl", wl);
  if (state.logUpload) { p.set("log", state.logUpload); p.set("logname", state.logName || ""); }
  for (const [id, key, dflt] of TRAFFIC_FIELDS) if ($(id).value !== dflt) p.set(key, $(id).value);
  for (const [id, key, dflt] of SIZING_FIELDS) if ($(id).value !== dflt) p.set(key, $(id).value);
  if (state.compare.length) p.set("cmp", JSON.stringify(state.compare.map((c) => c.argv)));
  history.replaceState(null, "", "?" + p.toString());
}

function restoreUrl() {
  const p = new URLSearchParams(location.search);
  state.view = ["traffic", "sizing"].includes(p.get("view")) ? p.get("view") : "plan";
  $("model").value = p.get("model") || "meta-llama/Meta-Llama-3-8B";
  if (p.get("upload")) { state.upload = p.get("upload"); state.uploadName = p.get("model"); }
  const gpu = p.get("gpu");
  if (gpu) {  // a GPU the catalog lacks (a hand-edited link) is kept, so the server's message names it
    if (![...$("gpu").options].some((o) => o.value === gpu)) $("gpu").append(el("option", { value: gpu }, gpu));
    $("gpu").value = gpu;
  }
  if (p.get("mem")) $("gpu-memory").value = p.get("mem");
  for (const [id, , key, dflt] of PLAN_FIELDS) {
    const v = p.get(key);
    if (v !== null) {
      if ($(id).tagName === "SELECT" && ![...$(id).options].some((o) => o.value === v)) $(id).append(el("option", { value: v }, v));
      $(id).value = v;
    } else $(id).value = dflt;
  }
  if (p.get("wl") === "log") $("wl-log").checked = true;
  if (p.get("log")) { state.logUpload = p.get("log"); state.logName = p.get("logname") || "requests"; $("log-name").textContent = `log: ${state.logName}`; }
  for (const [id, key, dflt] of TRAFFIC_FIELDS) $(id).value = p.get(key) !== null ? p.get(key) : dflt;
  for (const [id, key, dflt] of SIZING_FIELDS) $(id).value = p.get(key) !== null ? p.get(key) : dflt;
  try { const cmp = JSON.parse(p.get("cmp") || "[]"); if (Array.isArray(cmp)) state.pendingCompare = cmp.filter(Array.isArray); } catch (err) { /* a hand-edited link: no tray */ }
}

// ---------- plan view ----------
async function refreshPlan() {
  const seq = ++state.planSeq;
  const argv = planArgv();
  $("cli-cmd").textContent = state.view === "sizing" ? cliLine("tune", sizeArgv())
    : cliLine(state.view === "traffic" ? "simulate" : "plan", state.view === "traffic" ? safeSimArgv() : argv);
  saveUrl();
  try {
    const plan = await api("/api/plan", { argv });
    if (seq !== state.planSeq) return;  // a newer change answered first
    state.plan = plan;
    showError(null);
    renderPlan(plan);
    document.body.dataset.planArgv = JSON.stringify(argv);
  } catch (err) {
    if (seq !== state.planSeq) return;
    showError(err.message);
  } finally {
    if (seq === state.planSeq) document.body.dataset.planSeq = String(seq);
  }
}
const refreshPlanSoon = debounce(refreshPlan, 150);
function safeSimArgv() { try { return simArgv(); } catch (err) { return planArgv(); } }

function renderPlan(p) {
  const st = p.startup;
  const v = $("verdict");
  v.className = "verdict " + (st.ok ? (st.warnings.length ? "warn" : "ok") : "bad");
  v.dataset.ok = String(st.ok);
  $("verdict-title").textContent = st.ok
    ? `vLLM ${p.vllm_semantics} starts: ${fmtInt(p.kv.kv_cache_tokens)} KV tokens, ${fmt(p.kv.max_concurrency)}× concurrency at ${fmtInt(p.flags.max_model_len)} tokens`
    : `vLLM ${p.vllm_semantics} would not start`;
  $("verdict-error").textContent = st.error || "";
  const fix = clear($("verdict-fix"));
  const fw = st.fits_with;
  if (!st.ok && fw && fw.found) {  // kvplan plan's "smallest layout that starts" (memory/layout_fit.layout_fit_text)
    const flags = { tensor_parallel_size: fw.tensor_parallel_size, pipeline_parallel_size: fw.pipeline_parallel_size };
    fix.append("Fix: ", el("button", { type: "button", class: "apply", onclick: () => applyFlags(flags) },
      `--tensor-parallel-size ${fw.tensor_parallel_size}` + (fw.pipeline_parallel_size > 1 ? ` --pipeline-parallel-size ${fw.pipeline_parallel_size}` : "")),
      ` — the smallest layout that starts at max_model_len ${fmtInt(fw.max_model_len)}: ${fw.gpus_per_replica} ${p.flags.gpu} GPU${fw.gpus_per_replica !== 1 ? "s" : ""}` +
      ` (${fw.nodes} node${fw.nodes !== 1 ? "s" : ""}).`);
    if (st.suggested_max_model_len) fix.append(" Or ");
  } else if (!st.ok && fw && !fw.found && fw.reason) {
    fix.append(`More GPUs: ${fw.reason}. `);
  }
  if (!st.ok && !(fw && fw.found)) {
    if (st.suggested_max_model_len) {
      fix.append("Fix: ", el("button", { type: "button", class: "apply", onclick: () => { $("mml").value = String(st.suggested_max_model_len); onPlanInput(); } },
        `--max-model-len ${st.suggested_max_model_len}`));
    }
    // above the model's own limit only a shorter max_model_len helps: memory what-ifs (fp8, TP, utilisation) do not
    const ok = st.error_kind === "max_model_len_above_derived" ? [] : p.what_if.filter((w) => w.ok);
    if (ok.length) {
      fix.append(st.suggested_max_model_len ? " or " : "Fix: ");
      ok.slice(0, 3).forEach((w, i) => { if (i) fix.append(" · "); fix.append(whatIfButton(w)); });
    }
  }
  if (!st.ok && fw && fw.found && st.suggested_max_model_len) {
    fix.append(el("button", { type: "button", class: "apply", onclick: () => { $("mml").value = String(st.suggested_max_model_len); onPlanInput(); } },
      `--max-model-len ${st.suggested_max_model_len}`), " on this layout.");
  }
  const warns = clear($("verdict-warnings"));
  if (st.borderline && st.kv_margin_gib !== null && st.kv_margin_gib !== undefined) {  // report/_common.borderline_text
    const side = st.kv_margin_gib < 0 ? "short of" : "above";
    if (st.estimate_error_gib !== null && st.estimate_error_gib !== undefined && Math.abs(st.kv_margin_gib) > st.estimate_error_gib) {
      warns.append(el("li", {}, `Borderline: with FlashInfer's sampler (the release image) the estimated KV memory is ` +
        `${fmt(st.kv_margin_gib)} GiB above what one ${fmtInt(p.flags.max_model_len)}-token request needs; a plain pip install ` +
        `of this vLLM has no FlashInfer, and then vLLM refuses. To settle it, ${st.settle_with}.`));
    } else warns.append(el("li", {}, `Borderline: the estimated KV memory is ${fmt(Math.abs(st.kv_margin_gib))} GiB ${side} what one ` +
      `${fmtInt(p.flags.max_model_len)}-token request needs, inside the estimate's error of ±${fmt(st.estimate_error_gib)} GiB, so vLLM may ` +
      `${st.kv_margin_gib < 0 ? "start" : "refuse"} after all. To settle it, ${st.settle_with}.`));
  }
  for (const w of st.warnings) warns.append(el("li", {}, w));
  $("kv-line").textContent = p.kv.log_lines.join("\n");
  const facts = clear($("kv-facts"));
  const fact = (k, val) => facts.append(el("div", {}, el("span", { class: "k" }, k), el("span", { class: "v" }, val)));
  fact("KV per token (per GPU)", `${fmtInt(p.kv.bytes_per_token_per_gpu)} B`);
  fact("blocks", `${fmtInt(p.kv.num_gpu_blocks)} × ${p.kv.block_size} tokens`);
  fact("available KV / GPU", `${fmt(p.memory.available_kv_cache_gib)} GiB`);
  fact("max_num_seqs / batched tokens", `${fmtInt(p.flags.max_num_seqs)} / ${fmtInt(p.flags.max_num_batched_tokens)}`);
  fact("GPUs", `${p.parallel.total_gpus} (${p.parallel.nodes} node${p.parallel.nodes > 1 ? "s" : ""})`);
  fact("model", `${p.model.summary}`);
  renderSlider(p);
  drawMemory($("mem-stack"), p);
  drawCapacity($("cap-curve"), p);
  // kvplan plan's title (report/_common): rows planned at the fallback length say so
  $("whatifs-title").textContent = p.what_if_at_fallback_length
    ? `What if (each row planned at --max-model-len ${fmtInt(p.what_if_max_model_len)}, the fallback length: ${fmtInt(p.flags.max_model_len)} fails)`
    : "What if";
  const tb = clear($("whatifs").tBodies[0]);
  for (const w of p.what_if) {
    tb.append(el("tr", { class: w.ok ? "" : "bad" }, el("td", {}, whatIfButton(w)), el("td", {}, w.ok ? "yes" : "no"),
      el("td", {}, fmt(w.available_kv_cache_gib)), el("td", {}, fmtInt(w.kv_cache_tokens)), el("td", {}, `${fmt(w.max_concurrency)}×`)));
  }
  const naive = clear($("naive"));
  $("naive-card").hidden = !p.naive;
  if (p.naive) {
    naive.append(el("p", {}, el("code", {}, p.naive.formula), ` claims ${fmt(p.naive.claimed_bytes / 2 ** 30)} GiB; vLLM needs ${fmt(p.naive.exact_bytes / 2 ** 30)} GiB (the formula is ${fmt(p.naive.ratio)}× off).`));
    const ul = el("ul");
    for (const why of p.naive.why) ul.append(el("li", {}, why));
    naive.append(ul);
  }
  // an uploaded config.json sits in the server's private folder: the commands name MODEL_DIR instead
  const uploaded = state.upload && modelArg() === state.upload;
  const local = (t) => uploaded ? t.split(p.model.id).join("MODEL_DIR") : t;
  // which command to offer: kvplan plan's rule (report/_common.run_block): never the failing one
  let run = null;
  if (p.serve_command_starts) {
    run = [st.ok ? "Run it" : `Run it at --max-model-len ${fmtInt(p.what_if_max_model_len || st.suggested_max_model_len)}: the largest length that starts (${fmtInt(p.flags.max_model_len)} fails)`,
           p.serve_command, p.serve_config_yaml];
  } else if (fw && fw.found) {
    run = [`Run this instead: TP ${fw.tensor_parallel_size} × PP ${fw.pipeline_parallel_size} on ${fw.gpus_per_replica} GPUs (the asked layout fails)`,
           fw.serve_command, fw.serve_config_yaml];
  }
  $("run-title").textContent = run ? run[0] : "No command to run: no layout starts";
  $("serve-cmd").textContent = run ? local(run[1]) : "";
  $("serve-yaml").textContent = run ? local(run[2]) : "";
  const mn = p.serve_command_starts ? p.multi_node : null;
  $("multi-node").hidden = !mn;
  if (mn) {
    $("mn-nodes").textContent = String(mn.nodes);
    $("mn-cmds").textContent = local([`# head node\n${mn.head_command.map(shellQuote).join(" ")}`,
      `# each worker node\n${mn.worker_command.map(shellQuote).join(" ")}`,
      `# on the head node\n${mn.serve_command.map(shellQuote).join(" ")}`].join("\n\n"));
    $("mn-note").textContent = mn.note;
  }
  const notes = clear($("notes"));
  if (uploaded) notes.append(el("li", {}, "MODEL_DIR: the folder holding your config.json and weights (the page only saw the config)."));
  for (const n of p.notes) notes.append(el("li", {}, n));
}

function whatIfButton(w) {
  return el("button", { type: "button", class: "apply", title: "apply this change", onclick: () => applyFlags(w.flags) }, w.change);
}
const FLAG_TO_ID = { tensor_parallel_size: "tp", pipeline_parallel_size: "pp", data_parallel_size: "dp", dtype: "dtype",
  quantization: "quantization", kv_cache_dtype: "kv-dtype", max_model_len: "mml", max_num_seqs: "mns",
  max_num_batched_tokens: "mnbt", gpu_memory_utilization: "gmu", block_size: "block-size" };
function applyFlags(flags) {
  for (const [k, v] of Object.entries(flags)) {
    if (k === "gpu") { if ([...$("gpu").options].some((o) => o.value === v)) $("gpu").value = v; continue; }
    const id = FLAG_TO_ID[k];
    if (!id) continue;
    if ($(id).tagName === "SELECT" && ![...$(id).options].some((o) => o.value === String(v))) $(id).append(el("option", { value: String(v) }, String(v)));
    $(id).value = String(v);
  }
  onPlanInput();
}

function renderSlider(p) {
  const limit = p.model.max_position_embeddings || Math.max(p.flags.max_model_len, 131072);
  const s = $("mml-slider");
  const max = Math.max(limit, p.flags.max_model_len);
  s.max = String(max);
  s.min = String(Math.min(256, p.flags.max_model_len));
  s.step = String(Math.min(256, p.flags.max_model_len));
  s.value = String(p.flags.max_model_len);
  const pos = (x) => `${Math.max(0, Math.min(100, ((x - Number(s.min)) / (max - Number(s.min))) * 100))}%`;
  const fit = p.startup.max_fitting_model_len;
  $("mark-fit").style.left = pos(fit);
  $("mark-fit").hidden = !fit;
  $("mark-limit").style.left = pos(limit);
  $("mml-fit-label").textContent = fit ? `fits: ≤ ${fmtInt(fit)}` : "nothing fits";
  $("mml-limit-label").textContent = `model limit ${fmtInt(limit)}`;
  $("mml").placeholder = `default (${fmtInt(p.flags.max_model_len)})`;
}

// ---------- charts (inline SVG) ----------
const COLORS = { weights: "#4e79a7", lora: "#76b7b2", draft: "#ff9da7", activation: "#f28e2b", cudagraph: "#b07aa1",
                 non_torch: "#9c755f", kv: "#59a14f", outside: "#d9d9d9", over: "#e15759" };

function drawMemory(box, p) {
  const m = p.memory;
  const W = 460, H = 250, x0 = 40, barW = 120, top = 16, bottom = 226;
  const total = m.total_gib_per_gpu;
  const kv = Math.max(0, m.available_kv_cache_gib);
  const segs = [["weights", "weights", m.weights_gib_per_gpu], ["lora", "LoRA adapters", m.lora_gib || 0],
    ["draft", "draft model", m.draft_weights_gib || 0], ["activation", "activation peak", m.activation_peak_gib],
    ["cudagraph", "CUDA graphs", m.cudagraph_gib], ["non_torch", "non-torch", m.non_torch_gib], ["kv", "KV cache", kv]];
  const used = segs.reduce((a, s) => a + s[2], 0);
  const over = Math.max(0, used - total);
  const outside = Math.max(0, total - m.requested_gib);
  const scaleMax = Math.max(total, used);
  const y = (g) => bottom - (g / scaleMax) * (bottom - top);
  const s = svg("svg", { viewBox: `0 0 ${W} ${H}`, class: "chart", role: "img", "aria-label": "memory per GPU" });
  s.append(svg("rect", { x: x0, y: y(total), width: barW, height: bottom - y(total), fill: "none", stroke: "#888", "stroke-dasharray": "4 3" }));
  let acc = 0;
  const rows = [];
  for (const [key, label, gib] of segs) {
    if (gib <= 0) continue;
    const r = svg("rect", { x: x0, y: y(acc + gib), width: barW, height: Math.max(0.5, y(acc) - y(acc + gib)), fill: COLORS[key], "data-seg": key });
    r.append(svg("title", {}, `${label}: ${fmt(gib)} GiB`));
    s.append(r);
    rows.push([key, label, gib]);
    acc += gib;
  }
  if (outside > 0) rows.push(["outside", "outside the budget", outside]);
  if (over > 0) rows.push(["over", "over the GPU's memory", over]);
  if (over > 0) s.append(svg("line", { x1: x0 - 6, x2: x0 + barW + 6, y1: y(total), y2: y(total), stroke: COLORS.over, "stroke-width": 2.5 }));
  s.append(svg("line", { x1: x0 - 6, x2: x0 + barW + 6, y1: y(m.requested_gib), y2: y(m.requested_gib), stroke: "#333", "stroke-width": 1.5 }));
  s.append(svg("text", { x: x0 - 8, y: y(m.requested_gib) + 4, "text-anchor": "end", class: "tick" }, fmt(m.requested_gib, 1)));
  s.append(svg("text", { x: x0 - 8, y: y(total) + 4, "text-anchor": "end", class: "tick" }, fmt(total, 1)));
  s.append(svg("text", { x: x0 + barW / 2, y: bottom + 18, "text-anchor": "middle", class: "tick" }, `${p.flags.gpu} (GiB)`));
  rows.forEach(([key, label, gib], i) => {
    const ly = top + 8 + i * 24;
    s.append(svg("rect", { x: 200, y: ly - 10, width: 14, height: 14, fill: COLORS[key], rx: 2 }));
    s.append(svg("text", { x: 222, y: ly + 2, class: "legend" }, `${label}: ${fmt(gib)} GiB`));
  });
  s.append(svg("text", { x: 200, y: top + 8 + rows.length * 24 + 10, class: "legend muted" },
    `budget ${fmt(m.requested_gib)} of ${fmt(total)} GiB (utilisation ${p.flags.gpu_memory_utilization})`));
  clear(box).append(s);
}

function axes(s, W, H, pad, xTicks, yTicks, xLabel, yLabel) {
  s.append(svg("line", { x1: pad.l, x2: W - pad.r, y1: H - pad.b, y2: H - pad.b, stroke: "#999" }));
  s.append(svg("line", { x1: pad.l, x2: pad.l, y1: pad.t, y2: H - pad.b, stroke: "#999" }));
  for (const [x, label] of xTicks) s.append(svg("text", { x, y: H - pad.b + 15, "text-anchor": "middle", class: "tick" }, label));
  for (const [y, label] of yTicks) {
    s.append(svg("line", { x1: pad.l, x2: W - pad.r, y1: y, y2: y, stroke: "#eee" }));
    s.append(svg("text", { x: pad.l - 5, y: y + 4, "text-anchor": "end", class: "tick" }, label));
  }
  s.append(svg("text", { x: (pad.l + W - pad.r) / 2, y: H - 4, "text-anchor": "middle", class: "axis" }, xLabel));
  s.append(svg("text", { x: 12, y: (pad.t + H - pad.b) / 2, "text-anchor": "middle", class: "axis", transform: `rotate(-90 12 ${(pad.t + H - pad.b) / 2})` }, yLabel));
}
const kTok = (n) => n >= 1024 && n % 1024 === 0 ? `${n / 1024}K` : fmtInt(n);

function drawCapacity(box, p) {
  const rows = p.capacity_table.filter((r) => r.max_model_len > 0);
  clear(box);
  if (!rows.length) return;
  const W = 460, H = 250, pad = { l: 52, r: 14, t: 12, b: 40 };
  const lx = rows.map((r) => Math.log2(r.max_model_len));
  const conc = rows.map((r) => Math.max(r.max_concurrency, 0.01));
  const ly = conc.map(Math.log10);
  const xmin = Math.min(...lx), xmax = Math.max(...lx, xmin + 1);
  const ymin = Math.floor(Math.min(...ly, 0)), ymax = Math.ceil(Math.max(...ly, ymin + 1));
  const X = (v) => pad.l + ((v - xmin) / (xmax - xmin)) * (W - pad.l - pad.r);
  const Y = (v) => H - pad.b - ((v - ymin) / (ymax - ymin)) * (H - pad.t - pad.b);
  const s = svg("svg", { viewBox: `0 0 ${W} ${H}`, class: "chart", role: "img", "aria-label": "capacity curve" });
  const yT = [];
  for (let e = ymin; e <= ymax; e++) yT.push([Y(e), e >= 0 ? fmtInt(10 ** e) : String(10 ** e)]);
  const step = Math.max(1, Math.ceil(rows.length / 7));
  axes(s, W, H, pad, rows.filter((_, i) => i % step === 0).map((r) => [X(Math.log2(r.max_model_len)), kTok(r.max_model_len)]), yT,
       "max_model_len (tokens)", "concurrent requests");
  s.append(svg("polyline", { points: rows.map((r, i) => `${X(lx[i])},${Y(ly[i])}`).join(" "), fill: "none", stroke: "#4e79a7", "stroke-width": 2 }));
  rows.forEach((r, i) => {
    const c = svg("circle", { cx: X(lx[i]), cy: Y(ly[i]), r: 3.5, fill: r.fits ? "#59a14f" : "#e15759" });
    c.append(svg("title", {}, `${kTok(r.max_model_len)}: ${fmt(r.max_concurrency)}× (${r.fits ? "fits" : "does not fit"})`));
    s.append(c);
  });
  const cur = p.flags.max_model_len;
  if (cur > 0) {
    const cx = X(Math.max(xmin, Math.min(xmax, Math.log2(cur))));
    s.append(svg("line", { x1: cx, x2: cx, y1: pad.t, y2: H - pad.b, stroke: "#333", "stroke-dasharray": "3 3" }));
    const right = cx > W / 2;
    s.append(svg("text", { x: right ? cx - 4 : cx + 4, y: pad.t + 10, class: "tick", "text-anchor": right ? "end" : "start" }, `now ${kTok(cur)}: ${fmt(p.kv.max_concurrency)}×`));
  }
  box.append(s);
}

function drawLines(box, series, xLabel, yLabel, opts = {}) {
  clear(box);
  const W = 460, H = 250, pad = { l: 52, r: opts.right ? 44 : 14, t: 14, b: 40 };
  const all = series.flatMap((sr) => sr.points);
  if (!all.length) return;
  const xmin = Math.min(...all.map((p) => p[0])), xmax = Math.max(...all.map((p) => p[0]), xmin + 1e-9);
  const left = series.filter((sr) => !sr.right);
  const ymax = Math.max(1e-9, ...left.flatMap((sr) => sr.points.map((p) => p[1])));
  const X = (v) => pad.l + ((v - xmin) / (xmax - xmin)) * (W - pad.l - pad.r);
  const Y = (v, right) => H - pad.b - (right ? v : v / ymax) * (H - pad.t - pad.b);
  const s = svg("svg", { viewBox: `0 0 ${W} ${H}`, class: "chart", role: "img", "aria-label": yLabel });
  const xt = [0, 0.25, 0.5, 0.75, 1].map((f) => [X(xmin + f * (xmax - xmin)), opts.xfmt ? opts.xfmt(xmin + f * (xmax - xmin)) : fmt(xmin + f * (xmax - xmin), 0)]);
  const yt = [0, 0.25, 0.5, 0.75, 1].map((f) => [Y(f * ymax), opts.yfmt ? opts.yfmt(f * ymax) : fmtInt(f * ymax)]);
  axes(s, W, H, pad, xt, yt, xLabel, yLabel);
  if (opts.right) {
    for (const f of [0, 0.5, 1]) s.append(svg("text", { x: W - pad.r + 4, y: Y(f, true) + 4, class: "tick" }, `${f * 100}%`));
  }
  series.forEach((sr, i) => {
    s.append(svg("polyline", { points: sr.points.map((p) => `${X(p[0]).toFixed(1)},${Y(p[1], sr.right).toFixed(1)}`).join(" "), fill: "none", stroke: sr.color, "stroke-width": 2, "data-series": sr.name }));
    s.append(svg("rect", { x: pad.l + 8 + i * 120, y: pad.t - 2, width: 12, height: 4, fill: sr.color }));
    s.append(svg("text", { x: pad.l + 24 + i * 120, y: pad.t + 3, class: "legend" }, sr.name));
  });
  if (opts.marks) for (const [v, label] of opts.marks) {
    if (v < xmin || v > xmax) continue;
    s.append(svg("line", { x1: X(v), x2: X(v), y1: pad.t, y2: H - pad.b, stroke: "#e15759", "stroke-dasharray": "4 3" }));
    s.append(svg("text", { x: X(v) + 3, y: H - pad.b - 6, class: "tick bad" }, label));
  }
  box.append(s);
}

// ---------- sizing view ----------
async function runSizing() {
  const argv = sizeArgv();
  $("cli-cmd").textContent = cliLine("tune", argv);
  saveUrl();
  const status = $("size-status");
  status.textContent = "sizing: every GPU type, every replica simulated…";
  $("run-size").disabled = true;
  const t0 = performance.now();
  try {
    const d = await api("/api/tune", { argv });
    showError(null);
    status.textContent = `sized in ${fmt((performance.now() - t0) / 1000, 1)} s (round trip)`;
    renderSizing(d);
    document.body.dataset.sizeArgv = JSON.stringify(argv);
    return d;
  } catch (err) {
    status.textContent = "";
    showError(err.message);
    return null;
  } finally {
    $("run-size").disabled = false;
    document.body.dataset.sizeDone = String(Number(document.body.dataset.sizeDone || 0) + 1);
  }
}

const money = (x, d = 2) => (x === null || x === undefined) ? "–" : "$" + Number(x).toLocaleString("en-US", { minimumFractionDigits: d, maximumFractionDigits: d });
function capText(s) {
  const c = s.capacity || {};
  if (c.max_rate === null || c.max_rate === undefined) return c.at_least ? `≥ ${fmt(c.at_least)} req/s` : "–";
  return `${fmt(c.max_rate)} req/s ± ${Math.round((c.noise || 0) * 100)}%` + (c.judged === false ? " (lower bound)" : "");
}
function renderSizing(d) {
  $("size-results").hidden = false;
  const w = d.winner;
  const v = clear($("size-verdict"));
  v.className = "verdict " + (w ? "ok" : "bad");
  v.dataset.gpus = w ? String(w.gpus) : "";
  v.append(el("div", { class: "title" }, w
    ? `${w.gpus} × ${w.gpu}: ${w.replicas} replicas of TP${w.flags.tensor_parallel_size} carry ${fmt(d.target_rate)} req/s` +
      (w.cost && w.cost.usd_per_hour !== null && w.cost.usd_per_hour !== undefined ? `, ${money(w.cost.usd_per_hour)}/hour` : "")
    : `No fleet of up to ${fmtInt(d.max_gpus)} GPUs carries ${fmt(d.target_rate)} req/s within the SLO`));
  const tb = clear($("size-table").tBodies[0]);
  for (const s of d.per_gpu_type) {
    const at = s.at_target || {};
    const tr = el("tr", { "data-gpu": s.gpu, "data-gpus": s.gpus === null ? "" : String(s.gpus) },
      el("td", {}, s.gpu), el("td", {}, s.gpus === null ? "–" : fmtInt(s.gpus)),
      el("td", {}, s.replicas ? `${s.replicas} × TP${s.flags.tensor_parallel_size}` : (s.reason || "–")),
      el("td", {}, capText(s)), el("td", {}, s.capacity && s.capacity.per_gpu ? fmt(s.capacity.per_gpu, 3) : "–"),
      el("td", {}, at.ttft_p99 !== undefined ? fmtSec(at.ttft_p99) : "–"),
      el("td", {}, money((s.cost || {}).usd_per_hour)), el("td", {}, money((s.cost || {}).usd_per_million_output_tokens, 3)));
    tb.append(tr);
  }
  const lb = d.load_balancer || {};
  $("size-lb-text").textContent = `load balancer ${lb.name || "?"}: ${lb.text || ""} (${lb.source || ""}). ` + (d.notes || []).join(" ");
  const colors = ["#3b6fd8", "#59a14f", "#e15759", "#f28e2b"];
  const series = d.per_gpu_type.filter((s) => s.capacity && s.capacity.curve && s.capacity.curve.length)
    .map((s, i) => ({ name: `${s.gpu} ×${s.gpus}`, color: colors[i % colors.length],
                      points: s.capacity.curve.filter((p) => p.ttft_p99 !== null).map((p) => [p.rate, p.ttft_p99]) }));
  drawLines($("size-curve"), series, "offered req/s", "TTFT p99 (s)", { yfmt: (x) => fmt(x, 2), xfmt: (x) => fmt(x, 1),
    marks: [[d.target_rate, "target"]] });
  const launch = w && w.launch && w.launch.commands ? w.launch.commands.map(([where, cmd]) => `# ${where}\n${cmd}`).join("\n") : (w ? w.serve_command : "");
  $("size-launch").textContent = launch;
  $("size-launch-note").textContent = w && w.launch ? w.launch.note || "" : "";
}

// ---------- traffic view ----------
async function runSimulation() {
  let argv;
  try { argv = simArgv(); } catch (err) { showError(err.message); return null; }
  $("cli-cmd").textContent = cliLine("simulate", argv);
  saveUrl();
  const status = $("sim-status");
  status.textContent = "simulating…";
  $("run-sim").disabled = true;
  const t0 = performance.now();
  try {
    const d = await api("/api/simulate", { argv });
    showError(null);
    status.textContent = `simulated ${fmtInt(d.requests.total)} requests in ${fmt((performance.now() - t0) / 1000, 2)} s (round trip)`;
    renderSim(d);
    document.body.dataset.simArgv = JSON.stringify(argv);
    return { argv, d };
  } catch (err) {
    status.textContent = "";
    showError(err.message);
    return null;
  } finally {
    $("run-sim").disabled = false;
    document.body.dataset.simDone = String(Number(document.body.dataset.simDone || 0) + 1);
  }
}

function renderSim(d) {
  $("sim-results").hidden = false;
  const v = $("sim-verdict");
  clear(v);
  v.className = "verdict " + (d.verdict.passed ? "ok" : "bad");
  v.dataset.passed = String(d.verdict.passed);
  const sat = d.saturation || {};
  const said = { met: "Every SLO is met", missed: "An SLO is missed", no_slo: "No SLO given",
    not_judged: "Not judged: every SLO holds on this trace, but it is too short to judge the backlog" };
  v.append(el("div", {}, (said[d.verdict.state] || (d.verdict.passed ? said.met : said.missed))
    + (sat.saturated ? ": the server is saturated" : "")));
  if (d.verdict.checks.length) {
    const ul = el("ul", { class: "checks" });
    for (const c of d.verdict.checks) {
      const secs = /^(ttft|tpot|itl|e2e)_/.test(c.name || "");
      const show = (x) => secs ? fmtSec(x) : fmt(x, 4);
      const txt = c.name !== undefined ? `${c.name}: ${show(c.value)} (limit ${show(c.limit)})`
        : Object.entries(c).filter(([k]) => k !== "passed").map(([k, x]) => `${k}=${x}`).join(" ");
      ul.append(el("li", { class: (c.passed ?? c.ok) ? "pass" : "fail" }, (c.passed ?? c.ok) ? "PASS " : "FAIL ", txt));
    }
    v.append(ul);
  }
  if (sat.reason) v.append(el("div", { class: "small" }, sat.reason));
  const facts = clear($("sim-facts"));
  const fact = (k, val) => facts.append(el("div", {}, el("span", { class: "k" }, k), el("span", { class: "v" }, val)));
  fact("throughput", `${fmt(d.throughput.requests_per_s)} req/s`);
  fact("output tokens/s", fmtInt(d.throughput.output_tokens_per_s));
  fact("total tokens/s", fmtInt(d.throughput.total_tokens_per_s));
  fact("completed", `${fmtInt(d.requests.completed)} / ${fmtInt(d.requests.total)}`);
  fact("preemptions", fmtInt(d.preemptions));
  fact("peak KV usage", `${fmt(d.kv_cache.peak_usage * 100, 1)}%`);
  fact("trace", d.trace.source);
  const tb = clear($("sim-pct").tBodies[0]);
  for (const [k, label] of [["ttft", "TTFT"], ["tpot", "TPOT"], ["itl", "ITL"], ["e2e", "E2E"], ["queue", "queue"]]) {
    const q = d.latency_s[k];
    if (!q) continue;
    tb.append(el("tr", { "data-metric": k }, el("td", {}, label), ...["p50", "p90", "p99", "max", "mean"].map((s) => el("td", {}, fmtSec(q[s])))));
  }
  const prof = d.profile || {};
  const clock = [`Step-time clock: ${prof.source || "?"}.`];
  if (prof.fit) clock.push(`Stated error of the fit: ${JSON.stringify(prof.fit)}`);
  for (const n of prof.notes || []) clock.push(n + ".");
  for (const n of d.notes || []) clock.push(n);
  $("sim-clock").textContent = clock.join(" ");
  const tl = d.timeline || [];
  drawLines($("sim-timeline"), [
    { name: "running", color: "#4e79a7", points: tl.map((r) => [r.t, r.running]) },
    { name: "waiting", color: "#f28e2b", points: tl.map((r) => [r.t, r.waiting]) },
    { name: "KV usage (right)", color: "#59a14f", right: true, points: tl.map((r) => [r.t, r.kv_usage]) },
  ], "time (s)", "requests", { right: true });
  const cdf = (xs) => { const a = [...xs].sort((x, y) => x - y); return a.map((x, i) => [x, (i + 1) / a.length]); };
  const sm = d.samples || {};
  const series = [["ttft", "TTFT", "#4e79a7"], ["e2e", "E2E", "#f28e2b"]].filter(([k]) => sm[k] && sm[k].length)
    .map(([k, name, color]) => ({ name, color, right: true, points: cdf(sm[k]) }));
  const marks = [];
  if ($("slo-ttft").value) marks.push([Number($("slo-ttft").value) / 1000, "TTFT SLO"]);
  if ($("slo-e2e").value) marks.push([Number($("slo-e2e").value), "E2E SLO"]);
  drawLines($("sim-cdf"), series, "latency (s)", "fraction of requests",
            { right: true, xfmt: (x) => fmt(x, 1), yfmt: () => "", marks });
}

async function addCompare(argv) {
  const res = argv ? await simulateQuiet(argv) : await runSimulation();
  if (!res) return;
  state.compare.push(res);
  renderCompare();
  saveUrl();
}
async function simulateQuiet(argv) {
  try { return { argv, d: await api("/api/simulate", { argv }) }; } catch (err) { showError(`compare: ${err.message}`); return null; }
}

function renderCompare() {
  const t = $("compare");
  const head = clear(t.tHead.rows[0]);
  head.append(el("th", {}, ""));
  state.compare.forEach((c, i) => head.append(el("th", {}, `#${i + 1} `, el("button", { type: "button", class: "close", title: "remove",
    onclick: () => { state.compare.splice(i, 1); renderCompare(); saveUrl(); } }, "×"))));
  const rows = [
    ["model", (d) => d.config.model], ["GPU", (d) => d.config.gpu],
    ["TP × PP × DP", (d) => `${d.config.tensor_parallel_size} × ${d.config.pipeline_parallel_size} × ${d.config.data_parallel_size}`],
    ["max_model_len", (d) => fmtInt(d.config.max_model_len)], ["max_num_seqs", (d) => fmtInt(d.config.max_num_seqs)],
    ["KV blocks", (d) => fmtInt(d.config.num_gpu_blocks)], ["workload", (d) => d.trace.source],
    ["req/s", (d) => fmt(d.throughput.requests_per_s)], ["output tok/s", (d) => fmtInt(d.throughput.output_tokens_per_s)],
    ["TTFT p99", (d) => fmtSec(d.latency_s.ttft.p99)], ["TPOT p99", (d) => fmtSec(d.latency_s.tpot.p99)],
    ["E2E p99", (d) => fmtSec(d.latency_s.e2e.p99)], ["preemptions", (d) => fmtInt(d.preemptions)],
    ["SLO", (d) => d.verdict.checks.length ? (d.verdict.passed ? "PASS" : "FAIL") : "–"],
  ];
  const tb = clear(t.tBodies[0]);
  for (const [label, f] of rows) {
    const tr = el("tr", {}, el("th", {}, label));
    for (const c of state.compare) {
      const val = f(c.d);
      tr.append(el("td", { class: val === "PASS" ? "pass" : val === "FAIL" ? "fail" : "" }, val));
    }
    tb.append(tr);
  }
  $("compare-empty").hidden = state.compare.length > 0;
  t.hidden = state.compare.length === 0;  // an empty tray is its hint, not a column of row headers
}

// ---------- uploads ----------
const MAX_UPLOAD = 20 * 1024 * 1024;
async function upload(file, kind) {
  if (file.size > MAX_UPLOAD) {
    throw new Error(`${file.name}: ${fmt(file.size / 2 ** 20, 1)} MiB is over the page's ${MAX_UPLOAD / 2 ** 20} MiB upload limit (use the CLI for bigger files: kvplan lengths FILE)`);
  }
  const body = await file.arrayBuffer();
  return api(`/api/upload?kind=${kind}&name=${encodeURIComponent(file.name)}`, body, true);
}

async function takeConfig(file) {
  try {
    const info = await upload(file, "config");
    state.upload = info.id;
    state.uploadName = `${file.name} (${info.model_id})`;
    $("model").value = state.uploadName;
    $("model-summary").textContent = `uploaded: ${info.summary}`;
    showError(null);
    refreshPlan();
  } catch (err) { showError(err.message); }
}

async function takeLog(file) {
  try {
    const info = await upload(file, "log");
    state.logUpload = info.id;
    state.logName = file.name;
    $("wl-log").checked = true;
    onWorkloadMode();
    $("log-name").textContent = `log: ${file.name} (${fmtInt(info.bytes)} bytes)`;
    showError(null);
    saveUrl();
    await analyseLog();
  } catch (err) { showError(err.message); }
}

async function analyseLog() {
  const box = clear($("lengths-summary"));
  const model = modelArg();
  const argv = [state.logUpload];
  if (!model.startsWith("upload:")) argv.push("--model", model);
  const gpu = $("gpu").value;
  if (gpu !== "__custom__" && !model.startsWith("upload:")) argv.push("--gpu", gpu, "--tensor-parallel-size", $("tp").value || "1");
  let tok = false;
  if (!model.startsWith("upload:")) { try { tok = (await api(`/api/tokenizer?model=${encodeURIComponent(model)}`)).available; } catch (err) { tok = false; } }
  if (!tok) argv.push("--estimate");
  try {
    const d = await api("/api/lengths", { argv });
    const fact = (k, val) => box.append(el("div", {}, el("span", { class: "k" }, k), el("span", { class: "v" }, val)));
    fact("records", `${fmtInt(d.records.used)} used, ${fmtInt(Object.values(d.records.skipped || {}).reduce((a, b) => a + b, 0))} skipped`);
    const tk = d.inputs && d.inputs.tokenizer;
    fact("tokens counted with", tok && tk && tk.kind !== "estimate" ? `${model}'s tokenizer` : "server usage where logged, else an estimate from characters (no tokenizer of this model on this machine)");
    for (const [name, label] of [["prompt_tokens", "prompt tokens"], ["output_tokens", "output tokens"], ["total_tokens", "prompt + output budget"]]) {
      const q = d[name];
      if (q && q.count) fact(label, `p50 ${fmtInt(q.p50)} · p99 ${fmtInt(q.p99)} · max ${fmtInt(q.max)}`);
    }
    if (d.recommendation && d.recommendation.max_model_len) {
      const rec = d.recommendation.max_model_len;
      box.append(el("div", {}, el("span", { class: "k" }, "recommended max_model_len"), el("span", { class: "v" },
        el("button", { type: "button", class: "apply", onclick: () => { $("mml").value = String(rec); onPlanInput(); } }, `--max-model-len ${rec}`))));
    }
    const skipped = Object.entries(d.records.skipped || {});
    if (skipped.length) box.append(el("div", { class: "warnline", id: "skipped-lines" }, `skipped records: ${skipped.map(([k, n]) => `${k} (${n})`).join(", ")}`));
    for (const i of (d.issues || []).slice(0, 5)) box.append(el("div", { class: "warnline mono" }, typeof i === "string" ? i : (i.message || JSON.stringify(i))));
    for (const n of (d.notes || []).slice(0, 3)) box.append(el("div", { class: "small" }, n));
    box.dataset.used = String(d.records.used);
  } catch (err) { box.dataset.used = "0"; showError(err.message); }
}

function onDrop(ev) {
  ev.preventDefault();
  $("drop-hint").hidden = true;
  const file = ev.dataTransfer && ev.dataTransfer.files[0];
  if (!file) return;
  // a config.json by its name; another .json dropped on the Plan view is taken as one too
  const isConfig = /config[^/]*\.json$/i.test(file.name) || (state.view === "plan" && /\.json$/i.test(file.name));
  if (isConfig) takeConfig(file); else takeLog(file);
}

// ---------- wiring ----------
function onPlanInput() {
  if (state.view === "traffic") $("cli-cmd").textContent = cliLine("simulate", safeSimArgv());
  if (state.view === "sizing") $("cli-cmd").textContent = cliLine("tune", sizeArgv());
  refreshPlanSoon();
}
function onWorkloadMode() {
  const log = $("wl-log").checked;
  $("wl-bench-fields").hidden = log;
  $("wl-log-fields").hidden = !log;
  saveUrl();
}
function setView(v) {
  state.view = v;
  $("view-plan").hidden = v !== "plan";
  $("view-traffic").hidden = v !== "traffic";
  $("view-sizing").hidden = v !== "sizing";
  for (const b of document.querySelectorAll(".tab")) b.classList.toggle("active", b.dataset.view === v);
  $("cli-cmd").textContent = v === "traffic" ? cliLine("simulate", safeSimArgv()) : v === "sizing" ? cliLine("tune", sizeArgv()) : cliLine("plan", planArgv());
  saveUrl();
}
async function copyText(text, btn) {
  try { await navigator.clipboard.writeText(text); } catch (err) {
    const ta = el("textarea", {}); ta.value = text; document.body.append(ta); ta.select(); document.execCommand("copy"); ta.remove();
  }
  const old = btn.textContent; btn.textContent = "copied"; setTimeout(() => { btn.textContent = old; }, 1000);
}

async function init() {
  try {
    const [models, gpus, versions] = await Promise.all([api("/api/models"), api("/api/gpus"), api("/api/versions")]);
    state.models = models; state.gpus = gpus;
    const dl = $("model-list");
    for (const m of models) dl.append(el("option", { value: m.id }, `${m.summary}${m.aliases.length ? " · " + m.aliases.join(", ") : ""}`));
    for (const g of gpus) $("gpu").append(el("option", { value: g.name }, `${g.name} (${fmt(g.memory_gib)} GiB)`));
    $("gpu").append(el("option", { value: "__custom__" }, "custom memory…"));
    $("gpu").value = gpus.some((g) => g.name === "H100-SXM5-80GB") ? "H100-SXM5-80GB" : gpus[0].name;
    $("vllm-version").append(el("option", { value: "" }, `latest (${versions.latest})`));
    for (const v of versions.read) if (v !== versions.latest) $("vllm-version").append(el("option", { value: v }, v));
  } catch (err) { showError(err.message); }
  restoreUrl();
  $("gpu-memory-row").hidden = $("gpu").value !== "__custom__";
  onWorkloadMode();
  setView(state.view);
  for (const id of ["model", "gpu", "gpu-memory", ...PLAN_FIELDS.map((f) => f[0])]) {
    $(id).addEventListener("input", () => {
      if (id === "model") { const m = state.models.find((x) => x.id === $("model").value); $("model-summary").textContent = m ? m.summary : ""; }
      if (id === "gpu") $("gpu-memory-row").hidden = $("gpu").value !== "__custom__";
      onPlanInput();
    });
  }
  $("mml-slider").addEventListener("input", () => { $("mml").value = $("mml-slider").value; onPlanInput(); });
  for (const [id] of TRAFFIC_FIELDS) $(id).addEventListener("input", () => { saveUrl(); $("cli-cmd").textContent = cliLine("simulate", safeSimArgv()); });
  for (const r of document.querySelectorAll("input[name=wl]")) r.addEventListener("change", onWorkloadMode);
  for (const b of document.querySelectorAll(".tab")) b.addEventListener("click", () => setView(b.dataset.view));
  for (const b of document.querySelectorAll("button[data-copy]")) b.addEventListener("click", () => copyText($(b.dataset.copy).textContent, b));
  $("copy-cli").addEventListener("click", () => copyText($("cli-cmd").textContent, $("copy-cli")));
  $("share").addEventListener("click", () => copyText(location.href, $("share")));
  $("run-sim").addEventListener("click", runSimulation);
  $("run-size").addEventListener("click", runSizing);
  for (const [id] of SIZING_FIELDS) $(id).addEventListener("input", () => { saveUrl(); $("cli-cmd").textContent = cliLine("tune", sizeArgv()); });
  $("add-compare").addEventListener("click", () => addCompare());
  $("clear-compare").addEventListener("click", () => { state.compare = []; renderCompare(); saveUrl(); });
  $("config-file").addEventListener("change", (e) => { if (e.target.files[0]) takeConfig(e.target.files[0]); e.target.value = ""; });
  $("log-file").addEventListener("change", (e) => { if (e.target.files[0]) takeLog(e.target.files[0]); e.target.value = ""; });
  document.addEventListener("dragover", (e) => { e.preventDefault(); $("drop-hint").hidden = false; });
  document.addEventListener("dragleave", (e) => { if (!e.relatedTarget) $("drop-hint").hidden = true; });
  document.addEventListener("drop", onDrop);
  renderCompare();
  await refreshPlan();
  for (const argv of state.pendingCompare || []) await addCompare(argv.map(String));
  if (state.view === "traffic" && state.logUpload) analyseLog();
  document.body.dataset.ready = "1";
}

window.kvplanUi = { onDrop, takeConfig, takeLog, refreshPlan, runSimulation, runSizing, state };
document.addEventListener("DOMContentLoaded", init);
