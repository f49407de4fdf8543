// The planning page's tuning panel: starts a study with POST /tune (the API token), follows it through
// GET /tune/STUDY and /ui/tune/STUDY/trials, and stops it with DELETE /tune/STUDY (resumable).
// Uses page.js's helpers ($, state, fmt, cell, setStatus, errorText, postJSON): loaded after it.
"use strict";

function authHeaders() {
  const token = $("tune-token").value;
  return token ? { Authorization: `Bearer ${token}` } : {};
}

async function startTune(event) {
  event.preventDefault();
  const summary = $("tune-summary");
  $("tune-progress").hidden = false;
  const body = { model: $("tune-model").value.trim(), budget_s: Number($("tune-budget").value),
                 max_trials: Number($("tune-trials").value), backend: $("tune-backend").value };
  if ($("tune-gpus").value) body.gpus = Number($("tune-gpus").value);
  if ($("tune-study").value.trim()) body.study = $("tune-study").value.trim();
  state.stopping = null;
  try {
    const r = await postJSON("/tune", body, authHeaders());
    follow((await r.json()).study);
  } catch (e) {
    setStatus(summary, `tune: ${e.message}`, true);
  }
}

// One poll at a time, the newest answer wins: the next poll is asked 2 s after the last one's answer was shown (a
// slow server's polls used to pile up, each 2 s, and land out of order); following a study (again, or another)
// starts a new round, and a poll of an older round drops its answer when it comes.
function follow(study) {
  if (!study) return;
  const round = ++state.tuneRound;
  clearTimeout(state.tuneTimer);
  state.tuneStudy = study;
  $("tune-progress").hidden = false;
  $("watch-study").value = study;
  const tick = async () => {
    let done = false;
    try {
      done = await refreshTune(study, round);
    } catch (e) {  // the server is not answering (stopped, restarted): say so and ask again
      if (round === state.tuneRound) setStatus($("tune-summary"), `study ${study}: the server is not answering ` +
                                                                  `(${e.message}); asking again every 2 s`, true);
    }
    if (!done && round === state.tuneRound) state.tuneTimer = setTimeout(tick, 2000);
  };
  tick();
}

// Stop the followed study's worker (DELETE /tune/STUDY, the token of POST /tune): its running trial is
// killed and queued again; the page goes on following it until it reads interrupted.
async function stopTune() {
  const study = state.tuneStudy;
  if (!study) return;
  if (!confirm(`Stop study ${study}? Its running trial is killed and queued again; everything measured is kept, ` +
               `and Start tuning with study ${study} resumes it.`)) return;
  const summary = $("tune-summary");
  $("tune-stop").disabled = true;
  try {
    const r = await fetch(`/tune/${encodeURIComponent(study)}`, { method: "DELETE",
                                                                  headers: { ...authHeaders(), "X-Plan-Client": "page" } });
    if (!r.ok) throw new Error(await errorText(r));
    // its `why` speaks HTTP (GET /tune/STUDY, POST /tune): the page says it in its own words, until the worker stops
    state.stopping = { study, line: `SIGTERM sent to its worker (pid ${(await r.json()).pid}): its running trial is ` +
                                    "killed and queued again; this line reads interrupted once it has stopped" };
    setStatus(summary, `study ${study}: stopping | ${state.stopping.line}`);
    follow(study);
  } catch (e) {
    setStatus(summary, `stop ${study}: ${e.message}`, true);
  } finally {
    $("tune-stop").disabled = false;
  }
}

function counts(byStatus) {
  return Object.entries(byStatus).map(([k, v]) => `${k} ${v}`).join(", ");
}

// The study's trials, its worker's apart from the study's totals (a resumed study's count every run's): "this
// run" while it runs, "its last run" once it has ended.
function trialsText(rep, running) {
  const all = `${rep.launched} launched of ${rep.trials} trials (${counts(rep.by_status)})`;
  if (!rep.this_run) return `the study: ${all}`;
  const mine = rep.this_run;
  const own = counts(mine.by_status);
  return `${running ? "this run" : "its last run"}: launched ${mine.launched} trial${mine.launched === 1 ? "" : "s"}${own ? ` (${own})` : ""}; ` +
         `the study in all: ${all}`;
}

// The held-out calibration check (tuner/calibration_check.py): both errors, n, which calibration was kept, why.
function calibrationText(rep) {
  const c = rep.calibration_check;
  if (!c) return "";
  const pct = (x) => `${Math.round(x)}%`;
  if (c.held_out_mean_abs_pct === null || c.held_out_mean_abs_pct === undefined) {
    const base = c.baseline_mean_abs_pct === null ? "" : ` (its error ${pct(c.baseline_mean_abs_pct)} over ${c.n} trial${c.n === 1 ? "" : "s"})`;
    return `calibration: kept the ${c.baseline}${base}, not fitted: ${c.why}`;
  }
  const head = `calibration checked on ${c.n} trials it was not fitted on (${c.method}): ${c.baseline} ` +
               `${pct(c.baseline_mean_abs_pct)}, fitted ${pct(c.held_out_mean_abs_pct)}`;
  if (c.kept === "fitted")
    return `${head}: kept the fit (compute x${rep.calibration.compute.toPrecision(3)}, network ` +
           `x${rep.calibration.network.toPrecision(3)}): ${c.why}`;
  return `${head}: kept the ${c.baseline}: ${c.why}`;
}

// What a running study's worker is doing: its phase while it starts or re-measures (GET /tune/STUDY phase, doing,
// phase_s: between POST /tune and its first trial's end the line said only "running" for minutes), and each trial
// running now with what its log says (the report's `running`).
function activityText(st) {
  let text = "";
  if (st.phase && st.phase !== "trials") text += ` | ${st.phase} (${Math.round(st.phase_s || 0)} s): ${st.doing}`;
  for (const r of (st.report && st.report.running) || [])
    text += ` | trial #${r.trial} running${r.for_s == null ? "" : ` ${Math.round(r.for_s)} s`}: ${r.doing}`;
  return text;
}

// A study still being set up (its network measured: report.setup, tuner/study_setup.py) or whose set-up was stopped
// (a kill -9 in the bench): what it is at, and that starting it again measures again. A running worker of this server
// says the same in its phase line.
function setupText(s) {
  if (s.worker === "alive") return `${s.phase} (${Math.round(s.for_s || 0)} s): ${s.doing}`;
  return `no trial yet: its set-up stopped while ${s.phase} (${s.interrupted || "its worker died"}) at: ${s.doing}; ` +
         "Start tuning with this study measures again";
}

// The winner by the value it (and so its export) was chosen by: the median of its re-measurements where it has
// them (it showed the first run's tokens/s, 37,308 for a trial ranked by its median 26,775).
function bestText(best) {
  const knobs = `trial ${best.trial}, ${best.sharding}, mb ${best.micro_batch} x ga ${best.grad_accum}`;
  if (!best.runs || best.runs < 2) return `best: ${knobs}, ${fmt(best.tokens_per_s, 0)} tokens/s measured once`;
  const first = Math.round(best.tokens_per_s) === Math.round(best.chosen_tokens_per_s) ? "its first run's" :
    `its first ${fmt(best.tokens_per_s, 0)}`;  // a median that was its first run: not the same number twice
  return `best: ${knobs}, ${fmt(best.chosen_tokens_per_s, 0)} tokens/s, ${best.chosen_by} (${first})`;
}

// One poll of `round` (follow()): true once there is nothing more to follow. An answer that comes after a newer
// round began is dropped (true: its round is over).
async function refreshTune(study, round) {
  const summary = $("tune-summary");
  const stale = () => round !== state.tuneRound;
  const r = await fetch(`/tune/${encodeURIComponent(study)}`);
  if (stale()) return true;
  if (!r.ok) {
    const why = await errorText(r);
    if (stale()) return true;
    setStatus(summary, `${study}: ${why}`, true);
    return r.status === 404;
  }
  const st = await r.json();
  if (stale()) return true;
  const rep = st.report;
  const stopping = st.status === "running" && state.stopping && state.stopping.study === study ? state.stopping : null;
  if (st.status !== "running") state.stopping = null;
  // an interrupted study's line says once who stopped it and the one click that resumes it (the API's why says
  // both in HTTP's words, and what this run kept, which the trial counts say here)
  const interrupted = st.status === "interrupted";
  let text = `study ${study}: ${stopping ? `stopping | ${stopping.line}` : st.status}`;
  if (interrupted && st.stopped_by) text += ` | stopped by ${st.stopped_by}`;
  if (st.status === "running") text += activityText(st);
  if (rep && rep.setup) {
    if (st.status !== "running") text += ` | ${setupText(rep.setup)}`;
  } else if (rep) {
    text += ` | ${trialsText(rep, st.status === "running")}`;
    if (rep.best) text += ` | ${bestText(rep.best)}`;
  }
  // how the worker ended: a finished study's rule (the API's why repeats the trial counts, as "this run"), failed's why
  if (st.status === "finished" && st.stop_reason) text += ` | ended: ${st.stop_reason}`;
  else if (st.why && !(interrupted && st.stopped_by)) text += ` | ${st.why}`;
  else if (st.log_tail && !st.why) text += ` | ${st.log_tail.trim().split("\n").pop()}`;
  if (interrupted) text += ` | to resume: Start tuning with study ${study} (filled in above)`;
  if (rep && !(await showTrials(study, !!rep.best, stale))) return true;  // the rows first: a "finished" line comes with its final rows
  if (interrupted) $("tune-study").value = study;  // Start tuning resumes it: the study's name is filled in
  $("tune-calibration").textContent = rep ? calibrationText(rep) : "";
  $("tune-stop").hidden = st.status !== "running";
  setStatus(summary, text, st.status === "failed");
  return st.status !== "running";
}

// The trial table, links and chart; false (nothing drawn) when `stale()` says a newer round began meanwhile.
async function showTrials(study, hasBest, stale) {
  const r = await fetch(`/ui/tune/${encodeURIComponent(study)}/trials`);
  if (stale()) return false;
  if (!r.ok) return true;
  const data = await r.json();
  if (stale()) return false;
  const links = $("tune-links");
  links.innerHTML = "";
  const a = document.createElement("a");
  a.href = data.dashboard_url;
  a.target = "_blank";
  a.id = "dashboard-link";
  a.textContent = "open the study in optuna-dashboard";
  links.append(a, ` (start it with: ${data.dashboard_command})`);
  if (hasBest) {
    const ds = document.createElement("a");
    // the winner's own format: an FSDP study's plain-DDP winner has no FSDP file, a DeepSpeed one none either
    ds.href = `/export/${encodeURIComponent(study)}/best`;
    ds.textContent = "best trial's config (JSON)";
    links.append(" | ", ds);
  }
  const cols = ["trial", "status", "sharding", "offload", "activation_checkpointing", "micro_batch", "grad_accum",
                "predicted_tokens_per_s", "measured_tokens_per_s", "predicted_memory_gib", "measured_memory_gib"];
  const head = $("trials").tHead;
  head.innerHTML = "";
  const hr = head.insertRow();
  for (const c of cols) {
    const th = document.createElement("th");
    th.textContent = c.replace(/_/g, " ").replace("tokens per s", "tokens/s");
    hr.appendChild(th);
  }
  const body = $("trials").tBodies[0];
  body.innerHTML = "";
  for (const t of data.trials) {
    const tr = body.insertRow();
    for (const c of cols) {
      const v = t[c];
      cell(tr, typeof v === "number" ? fmt(v, c.endsWith("gib") ? 2 : (Number.isInteger(v) ? 0 : 1)) : (v ?? ""));
    }
  }
  const done = data.trials.filter((t) => t.measured_tokens_per_s && t.predicted_tokens_per_s);
  const max = Math.max(1, ...done.map((t) => Math.max(t.measured_tokens_per_s, t.predicted_tokens_per_s)));
  Plotly.react("tune-chart", [
    { type: "scatter", mode: "markers+text", name: "trials", x: done.map((t) => t.predicted_tokens_per_s),
      y: done.map((t) => t.measured_tokens_per_s), text: done.map((t) => `#${t.trial}`), textposition: "top center" },
    { type: "scatter", mode: "lines", name: "measured = predicted", x: [0, max * 1.1], y: [0, max * 1.1],
      line: { dash: "dot", color: "#888" } },
  ], { title: { text: "Predicted vs measured tokens/s" }, xaxis: { title: { text: "predicted" } },
       yaxis: { title: { text: "measured" } }, margin: { t: 50 } }, PLOT_CONFIG);
  return true;
}

document.addEventListener("DOMContentLoaded", () => {
  $("tune-form").addEventListener("submit", startTune);
  $("tune-watch").addEventListener("click", () => follow($("watch-study").value.trim()));
  $("tune-stop").addEventListener("click", stopTune);
});
