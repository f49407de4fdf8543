// The planning page: fills the form from GET /catalog, asks POST /ui/estimate and /ui/curve,
// draws the breakdowns with plotly.js (served by this app), downloads exports; the tuning panel: tune.js.
"use strict";

const $ = (id) => document.getElementById(id);
const state = { request: null, report: null, selected: 1, tuneTimer: null, tuneRound: 0, tuneStudy: null, stopping: null, moeModels: new Set() };
const MEMORY_TERMS = ["weights", "grads", "optimizer", "activations", "comm_buffers", "runtime", "fragmentation"];
const TIME_TERMS = [["compute_s", "compute"], ["comm_exposed_s", "exposed communication"],
                    ["bubble_s", "pipeline bubble"], ["offload_s", "offload"]];
const PLOT_CONFIG = { displaylogo: false, responsive: true, displayModeBar: false };

function fmt(x, digits = 1) {
  if (x === null || x === undefined) return "";
  return x.toLocaleString("en-US", { maximumFractionDigits: digits, minimumFractionDigits: digits });
}
function pct(x) { return x === null || x === undefined ? "" : `${Math.round(x * 100)}%`; }
function cell(tr, text, cls) {
  const td = document.createElement("td");
  td.textContent = text;
  if (cls) td.className = cls;
  tr.appendChild(td);
  return td;
}
function setStatus(el, text, isError) {
  el.textContent = text;
  el.classList.toggle("error", !!isError);
}
async function errorText(r) {
  try {
    const body = await r.json();
    if (Array.isArray(body.detail)) return body.detail.map((d) => `${d.loc[d.loc.length - 1]}: ${d.msg}`).join("; ");
    return String(body.detail);
  } catch (e) { return `HTTP ${r.status}`; }
}
async function postJSON(url, body, headers = {}, signal = undefined) {
  const r = await fetch(url, { method: "POST", headers: { "Content-Type": "application/json", ...headers },
                               body: JSON.stringify(body), signal });
  if (!r.ok) throw new Error(await errorText(r));
  return r;
}

// ---- the form --------------------------------------------------------------------------
async function loadCatalog() {
  const cat = await (await fetch("/catalog")).json();
  const fill = (sel, ids, chosen) => {
    for (const id of ids) {
      const o = document.createElement("option");
      o.value = o.textContent = id;
      if (id === chosen) o.selected = true;
      sel.appendChild(o);
    }
  };
  fill($("preset"), cat.models, cat.models.includes("llama2-7b") ? "llama2-7b" : cat.models[0]);
  fill($("cluster"), Object.keys(cat.clusters).sort(), "dgx-a100");
  fill($("gpu"), Object.keys(cat.gpus).sort(), null);
  state.moeModels = new Set(await (await fetch("/ui/moe-models")).json());
  showMoeSettings();
}

// The MoE settings for a preset with experts, or an uploaded config.json (the server refuses them,
// naming the field, if it has none); hidden fields are not sent.
function showMoeSettings() {
  const source = document.querySelector("input[name=model_source]:checked").value;
  $("moe-settings").hidden = !(source === "config" || (source === "preset" && state.moeModels.has($("preset").value)));
}

// POST /estimate's MoE and memory-saving fields: each input is named as the API field it fills.
function readApiFields(req) {
  for (const set of document.querySelectorAll("fieldset.api-fields")) {
    if (set.hidden) continue;
    for (const el of set.querySelectorAll("input[name]")) {
      if (el.type === "checkbox") req[el.name] = el.checked;
      else if (el.value !== "") req[el.name] = Number(el.value);
    }
  }
}

async function readRequest() {
  const source = document.querySelector("input[name=model_source]:checked").value;
  const num = (id) => ($(id).value === "" ? null : Number($(id).value));
  const text = (id) => ($(id).value.trim() === "" ? null : $(id).value.trim());
  const req = {
    cluster: text("cluster"), gpu: text("gpu"), gpus: num("gpus"), seq_len: num("seq_len"),
    global_batch: num("global_batch"), global_batch_tokens: text("global_batch_tokens"),
    tokens: text("tokens"), price_per_gpu_hour: num("price"), objective: $("objective").value,
  };
  readApiFields(req);
  if (source === "preset") req.model = $("preset").value;
  if (source === "size") req.model = text("size");
  if (source === "config") {
    const file = $("config").files[0];
    if (!file) throw new Error("config.json: choose a file");
    try { req.config = JSON.parse(await file.text()); } catch (e) { throw new Error(`${file.name}: not valid JSON`); }
    req.config_name = file.name.replace(/[^A-Za-z0-9_.+-]/g, "_").slice(0, 60) || "config.json";
  }
  return req;
}

async function plan(event) {
  event.preventDefault();
  const status = $("status");
  $("plan-button").disabled = true;
  setStatus(status, "planning...");
  try {
    const req = await readRequest();
    const report = await (await postJSON("/ui/estimate", req)).json();
    state.request = req;
    state.report = report;
    state.selected = 1;
    showReport(report);
    setStatus(status, `${report.fitting.toLocaleString()} of ${report.evaluated.toLocaleString()} candidates fit`);
    drawCurve(req);
  } catch (e) {
    setStatus(status, e.message, true);
  } finally {
    $("plan-button").disabled = false;
  }
}

// ---- ranked plans ------------------------------------------------------------------------
function showReport(report) {
  $("results").hidden = false;
  $("summary").textContent = report.header;
  const hasDays = report.plans.some((p) => p.days !== null);
  const hasCost = report.plans.some((p) => p.cost !== null);
  const cols = ["#", "layout", "sharding", "offload", "ckpt", "mb x ga", "batch", "GiB/GPU", "tokens/s",
                "TFLOPs/GPU", "MFU", "step s", "bottleneck", "net %"];
  if (hasDays) cols.push("days");
  if (hasCost) cols.push("cost");
  cols.push("fits");
  const head = $("plans").tHead;
  head.innerHTML = "";
  const hr = head.insertRow();
  for (const c of cols) {
    const th = document.createElement("th");
    th.textContent = c;
    if (["layout", "sharding", "offload", "ckpt", "bottleneck", "fits"].includes(c)) th.className = "text";
    hr.appendChild(th);
  }
  const body = $("plans").tBodies[0];
  body.innerHTML = "";
  for (const p of report.plans) {
    const tr = body.insertRow();
    tr.dataset.rank = p.rank;
    if (!p.fits) tr.classList.add("miss");
    cell(tr, p.rank);
    cell(tr, p.layout, "text");
    cell(tr, p.sharding, "text");
    cell(tr, p.offload, "text");
    cell(tr, p.activation_checkpointing, "text");
    cell(tr, `${p.micro_batch} x ${p.grad_accum}`);
    cell(tr, p.global_batch);
    const mem = cell(tr, `${fmt(p.memory_required_gib)} / ${fmt(p.memory_capacity_gib)}` + (p.memory_tight ? "*" : ""));
    if (mem) mem.title = `must fit ${fmt(p.memory_required_gib)} GiB (reserved peak ${fmt(p.memory_total_gib)} GiB)` +
      (p.memory_tight ? "; tight: within the memory model's error of capacity, it may not fit" : "");
    cell(tr, fmt(p.tokens_per_s, 0) + (p.tokens_per_s_error_pct === null ? "" : ` ±${Math.round(p.tokens_per_s_error_pct)}%`));
    cell(tr, fmt(p.tflops_per_gpu, 0));
    cell(tr, pct(p.mfu));
    cell(tr, fmt(p.step_time_s, 2));
    cell(tr, p.bottleneck || "", "text");
    const net = cell(tr, p.network_share === null || p.network_share === undefined ? "" : pct(p.network_share));
    if (net && p.network_gbps_needed !== null && p.network_gbps_needed !== undefined)
      net.title = p.network_gbps_needed === 0 ? "no inter-node traffic in this plan's step" :
        `share of the step the inter-node network costs; ${fmt(p.network_gbps_needed, 0)} Gbps per node ` +
        "would bring it within 1% of an unlimited network";
    if (hasDays) cell(tr, fmt(p.days, 1));
    if (hasCost) cell(tr, p.cost === null ? "" : `$${fmt(p.cost, 0)}`);
    cell(tr, p.fits ? "yes" : p.reason, "text");
    tr.addEventListener("click", () => select(p.rank));
  }
  const rej = $("rejected").tBodies[0];
  rej.innerHTML = "";
  for (const r of report.rejected) {
    const tr = rej.insertRow();
    cell(tr, r.count.toLocaleString());
    cell(tr, r.reason, "text");
  }
  select(1);
  drawBreakdowns(report);
}

function select(rank) {
  state.selected = rank;
  for (const tr of $("plans").tBodies[0].rows) tr.classList.toggle("selected", Number(tr.dataset.rank) === rank);
  $("selected-rank").textContent = `#${rank}`;
  const fits = state.report && state.report.plans[rank - 1] && state.report.plans[rank - 1].fits;
  for (const b of document.querySelectorAll("#exports button")) b.disabled = !fits;
}

// ---- charts ------------------------------------------------------------------------------
function drawBreakdowns(report) {
  const plans = report.plans;
  const labels = plans.map((p) => `#${p.rank} ${p.sharding}${p.offload !== "none" ? "+off" : ""} ${p.micro_batch}x${p.grad_accum}`);
  const yaxis = { autorange: "reversed", automargin: true, type: "category", dtick: 1 };
  const legend = { orientation: "h", y: -0.12, yanchor: "top", traceorder: "normal" };
  const memTraces = MEMORY_TERMS.map((term) => ({
    type: "bar", orientation: "h", name: term.replace("_", " "), y: labels,
    x: plans.map((p) => p.memory_gib[term]), hovertemplate: "%{x:.1f} GiB<extra>" + term + "</extra>",
  }));
  const capacity = plans.length ? plans[0].memory_capacity_gib : 0;
  Plotly.newPlot("memory-chart", memTraces, {
    title: { text: "Memory per GPU (GiB) against capacity" }, barmode: "stack",
    yaxis, xaxis: { rangemode: "tozero" },
    shapes: [{ type: "line", x0: capacity, x1: capacity, yref: "paper", y0: 0, y1: 1,
               line: { color: "#b00020", width: 2, dash: "dash" } }],
    annotations: [{ x: capacity, yref: "paper", y: 1, yanchor: "bottom", xanchor: "right",
                    text: `capacity ${fmt(capacity)} GiB`, showarrow: false }],
    legend, margin: { t: 60, b: 60 },
  }, PLOT_CONFIG);

  const timed = plans.filter((p) => p.time_s);
  const tLabels = timed.map((p) => labels[p.rank - 1]);
  const timeTraces = TIME_TERMS.map(([key, name]) => ({
    type: "bar", orientation: "h", name, y: tLabels, x: timed.map((p) => p.time_s[key]),
    hovertemplate: "%{x:.3f} s<extra>" + name + "</extra>",
  }));
  timeTraces.push({
    type: "scatter", mode: "markers", name: "at the GPUs' peak FLOPs (100% MFU)", y: tLabels,
    x: timed.map((p) => p.peak_step_time_s), marker: { symbol: "line-ns-open", size: 18, color: "#b00020" },
    hovertemplate: "%{x:.3f} s at peak<extra></extra>",
  });
  Plotly.newPlot("time-chart", timeTraces, {
    title: { text: "Step time (s per optimizer step, mb x ga) against the GPUs' peak" }, barmode: "stack",
    yaxis, xaxis: { rangemode: "tozero" },
    legend, margin: { t: 60, b: 60 },
  }, PLOT_CONFIG);
}

// a newer plan aborts the curve still coming for an older one: its late answer cannot replace the
// newer chart, and the server stops planning its counts (POST /ui/curve skips them once the page has gone)
let curveRequest = null;

async function drawCurve(req) {
  const el = $("curve-chart");
  if (curveRequest) curveRequest.abort();
  const mine = curveRequest = new AbortController();
  try {
    const points = await (await postJSON("/ui/curve", req, {}, mine.signal)).json();
    if (mine !== curveRequest) return;
    const fit = points.filter((p) => p.fits);
    const skipped = points.filter((p) => p.skipped).map((p) => p.gpus);
    const haveDays = fit.some((p) => p.days !== null);
    const traces = [];
    if (haveDays) {
      traces.push({ type: "scatter", mode: "lines+markers", name: "days", x: fit.map((p) => p.gpus),
                    y: fit.map((p) => p.days), text: fit.map((p) => p.layout) });
    } else {
      traces.push({ type: "scatter", mode: "lines+markers", name: "tokens/s", x: fit.map((p) => p.gpus),
                    y: fit.map((p) => p.tokens_per_s), text: fit.map((p) => p.layout) });
    }
    if (fit.some((p) => p.cost !== null)) {
      traces.push({ type: "scatter", mode: "lines+markers", name: "cost ($)", yaxis: "y2",
                    x: fit.map((p) => p.gpus), y: fit.map((p) => p.cost), text: fit.map((p) => p.layout) });
    }
    Plotly.newPlot(el, traces, {
      title: { text: (haveDays ? "Days and cost to train against GPUs" : "Tokens/s against GPUs (add tokens for days)") +
               (skipped.length ? `<br><sub>not planned (the server's curve budget, plan serve --curve-budget-s): ${skipped.join(", ")} GPUs</sub>` : "") },
      xaxis: { title: { text: "GPUs" }, type: "log", tickvals: points.map((p) => p.gpus), ticktext: points.map((p) => String(p.gpus)) },
      yaxis: { title: { text: haveDays ? "days" : "tokens/s" }, rangemode: "tozero" },
      yaxis2: { title: { text: "cost ($)" }, overlaying: "y", side: "right", rangemode: "tozero" },
      legend: { orientation: "h", y: -0.25 }, margin: { t: 50 },
    }, PLOT_CONFIG);
  } catch (e) {
    if (!mine.signal.aborted) el.textContent = `curve: ${e.message}`;
  }
}

// ---- exports -----------------------------------------------------------------------------
async function download(event) {
  const fmtName = event.currentTarget.dataset.format;
  const status = $("export-status");
  setStatus(status, `writing ${fmtName}...`);
  try {
    const r = await postJSON(`/ui/export/${fmtName}`, { ...state.request, rank: state.selected });
    const name = (/filename="([^"]+)"/.exec(r.headers.get("Content-Disposition") || "") || [])[1] || fmtName;
    const url = URL.createObjectURL(await r.blob());
    const a = document.createElement("a");
    a.href = url;
    a.download = name;
    document.body.appendChild(a);
    a.click();
    a.remove();
    setTimeout(() => URL.revokeObjectURL(url), 10000);
    setStatus(status, `downloaded ${name}`);
  } catch (e) {
    setStatus(status, e.message, true);
  }
}

// ---- wiring ------------------------------------------------------------------------------
document.addEventListener("DOMContentLoaded", async () => {
  $("scenario-form").addEventListener("submit", plan);
  for (const b of document.querySelectorAll("#exports button")) b.addEventListener("click", download);
  for (const id of ["preset", "size", "config"]) {
    const pick = () => {
      document.querySelector(`input[name=model_source][value=${id}]`).checked = true;
      showMoeSettings();
    };
    $(id).addEventListener("input", pick);
    $(id).addEventListener("change", pick);
  }
  for (const r of document.querySelectorAll("input[name=model_source]")) r.addEventListener("change", showMoeSettings);
  try {
    await loadCatalog();
    document.body.dataset.ready = "1";
  } catch (e) {
    setStatus($("status"), `catalog: ${e.message}`, true);
  }
});
