// The execution inspector: one execution's details, steps (with tool calls), snapshots as
// JSON trees and subagents nested under their parent; it follows a live run.

import { api, listAll } from './api.js';
import { $, el } from './dom.js';
import { clockTime, duration, parseTime, plural, shortId } from './format.js';
import { rootExec, view } from './view.js';

function jsonTree(value, depth = 0, key = null) {
  const keyNode = key == null ? null : el('span', { class: 'json-key' }, `${key}: `);
  if (value === null || typeof value !== 'object') {
    const type = value === null ? 'null' : typeof value;
    const text = typeof value === 'string' ? JSON.stringify(value) : String(value);
    return el('div', { class: 'json-leaf' }, keyNode, el('span', { class: `json-${type}` }, text));
  }
  const isArray = Array.isArray(value);
  const entries = isArray ? value.map((v, i) => [i, v]) : Object.entries(value);
  const open = isArray ? '[' : '{';
  const close = isArray ? ']' : '}';
  if (entries.length === 0) {
    return el('div', { class: 'json-leaf' }, keyNode, el('span', { class: 'json-punct' }, `${open}${close}`));
  }
  const details = el('details', { class: 'json-node' });
  if (depth < 1) details.open = true;
  details.append(el('summary', {}, keyNode, el('span', { class: 'json-punct' }, open),
    el('span', { class: 'json-size' }, ` ${plural(entries.length, isArray ? 'item' : 'key')} `),
    el('span', { class: 'json-punct json-close-inline' }, close)));
  const children = el('div', { class: 'json-children' });
  // Build children lazily: snapshots can be large.
  const build = () => {
    if (children.childElementCount || !details.open) return;
    for (const [k, v] of entries) children.append(jsonTree(v, depth + 1, k));
  };
  details.addEventListener('toggle', build);
  details.append(children, el('span', { class: 'json-punct json-close' }, close));
  build();
  return details;
}

function field(label, value) {
  if (value == null || value === '') return null;
  return el('div', { class: 'kv' }, el('dt', {}, label), el('dd', {}, value));
}

function stamp(text) {
  const t = parseTime(text);
  if (t == null) return null;
  const micros = /\.(\d{6})/.exec(text);
  const local = new Date(t).toLocaleString([], { year: 'numeric', month: 'short', day: 'numeric', hour: '2-digit', minute: '2-digit', second: '2-digit' });
  return el('time', { datetime: text, title: text }, micros ? `${local} (.${micros[1]})` : local);
}

function tokenText(usage) {
  if (!usage || !usage.total) return null;
  return `${usage.total} (in ${usage.input}, out ${usage.output})`;
}

function stepCard(step) {
  const calls = (step.tool_calls || []).map((call) => el('div', { class: 'tool-call' },
    el('div', { class: 'tool-name' }, el('span', { class: 'badge' }, 'tool'), ` ${call.name}`, call.id ? el('span', { class: 'muted' }, ` · ${call.id}`) : null),
    jsonTree(call.arguments, 0, 'arguments')));
  const timing = step.started_at && step.ended_at ? duration(step.started_at, step.ended_at) : '';
  return el('article', { class: `step-card${step.error ? ' step-error' : ''}`, 'data-step-number': String(step.step_number) },
    el('header', { class: 'step-head' },
      el('span', { class: 'step-num' }, `#${step.step_number}`),
      el('span', { class: 'badge' }, step.kind),
      timing ? el('span', { class: 'muted' }, timing) : null,
      tokenText(step.token_usage) ? el('span', { class: 'muted' }, `${tokenText(step.token_usage)} tokens`) : null,
      el('time', { class: 'muted', datetime: step.created_at, title: step.created_at }, clockTime(step.started_at || step.created_at))),
    step.model_output ? el('div', { class: 'step-section' }, el('div', { class: 'step-label' }, 'Thought'), el('pre', { class: 'pre' }, step.model_output)) : null,
    calls.length ? el('div', { class: 'step-section' }, el('div', { class: 'step-label' }, 'Tool calls'), ...calls) : null,
    step.code ? el('div', { class: 'step-section' }, el('div', { class: 'step-label' }, 'Code'), el('pre', { class: 'pre' }, step.code)) : null,
    step.observations ? el('div', { class: 'step-section' }, el('div', { class: 'step-label' }, 'Observations'), el('pre', { class: 'pre' }, step.observations)) : null,
    step.error ? el('div', { class: 'step-section step-error-text', role: 'note' }, el('div', { class: 'step-label' }, 'Error'), `${step.error.kind}: ${step.error.message}`) : null,
    step.output != null ? el('div', { class: 'step-section' }, el('div', { class: 'step-label' }, 'Output'), jsonTree(step.output, 0)) : null);
}

function snapshotRow(snapshot, current) {
  const details = el('details', { class: 'snapshot', 'data-snapshot-id': snapshot.id });
  const label = [
    `step ${snapshot.step_number}`,
    snapshot.is_final ? 'final' : null,
    snapshot.debug_mode ? 'debug' : null,
    snapshot.agent_name || snapshot.agent_id,
    snapshot.parent_snapshot_id ? `parent …${shortId(snapshot.parent_snapshot_id)}` : null,
  ].filter(Boolean).join(' · ');
  details.append(el('summary', {}, el('span', {}, `Snapshot ${label}`), el('time', { class: 'muted', datetime: snapshot.created_at }, ` ${clockTime(snapshot.created_at)}`)));
  const body = el('div', { class: 'snapshot-body' }, el('span', { class: 'muted' }, 'Loading…'));
  details.append(body);
  details.addEventListener('toggle', async () => {
    if (!details.open || details.dataset.loaded) return;
    details.dataset.loaded = '1';
    try {
      const full = await api('GET', `/v1/snapshots/${snapshot.id}`);
      if (current !== inspectorGen) return;
      body.replaceChildren(jsonTree(full.state, 0, 'state'));
    } catch (err) {
      body.replaceChildren(el('span', { class: 'error-text' }, `Could not load: ${err.message}`));
      delete details.dataset.loaded;
    }
  });
  return details;
}

let inspectorGen = 0;

async function executionSection(execId, allExecs, current, depth) {
  const [exec, steps, snapshots] = await Promise.all([
    api('GET', `/v1/executions/${execId}`),
    listAll(`/v1/executions/${execId}/steps`),
    listAll(`/v1/executions/${execId}/snapshots`),
  ]);
  if (current !== inspectorGen) return null;
  const usage = exec.token_usage || {};
  const section = el('section', { class: `inspect-exec depth-${depth}`, 'data-execution-id': exec.id },
    el('h3', {}, depth ? 'Subagent ' : '', el('span', { class: 'mono' }, `…${shortId(exec.id)}`), ' ',
      el('span', { class: `badge status-${exec.status}` }, exec.status), ' ',
      el('span', { class: `badge${exec.agent_type === 'demo' ? ' badge-demo' : ''}` }, exec.agent_type === 'demo' ? 'demo agent' : exec.agent_type)),
    el('dl', { class: 'kvs' },
      field('Execution id', el('span', { class: 'mono' }, exec.id)),
      field('Steps', String(exec.step_count)),
      field('Tokens', usage.total ? `${usage.total} (in ${usage.input}, out ${usage.output})` : '0'),
      field('Created', stamp(exec.created_at)),
      field('Started', stamp(exec.started_at)),
      field('Finished', stamp(exec.completed_at)),
      field('Duration', exec.started_at && exec.completed_at ? duration(exec.started_at, exec.completed_at) : null),
      field('Attempts', exec.attempts != null ? String(exec.attempts) : null),
      exec.error_message ? el('div', { class: 'kv kv-error' }, el('dt', {}, 'Error'), el('dd', {}, exec.error_message)) : null),
    el('details', { class: 'inspect-io' }, el('summary', {}, 'Input and output'),
      jsonTree(exec.input, 0, 'input'), jsonTree(exec.output, 0, 'output'),
      exec.agent_config && Object.keys(exec.agent_config).length ? jsonTree(exec.agent_config, 0, 'agent_config') : null));
  const stepList = el('div', { class: 'steps' });
  if (steps.length) steps.forEach((s) => stepList.append(stepCard(s)));
  else stepList.append(el('p', { class: 'muted' }, 'No steps yet.'));
  section.append(el('h4', {}, `Steps (${steps.length})`), stepList);
  const snapList = el('div', { class: 'snapshots' });
  if (snapshots.length) snapshots.forEach((s) => snapList.append(snapshotRow(s, current)));
  else snapList.append(el('p', { class: 'muted' }, 'No snapshots.'));
  section.append(el('h4', {}, `Snapshots (${snapshots.length})`), snapList);
  const children = allExecs.filter((e) => e.parent_execution_id === exec.id);
  if (children.length && depth < 8) {
    const wrap = el('div', { class: 'subagents' });
    section.append(el('h4', {}, `Subagents (${children.length})`), wrap);
    for (const child of children) {
      const childSection = await executionSection(child.id, allExecs, current, depth + 1);
      if (childSection) wrap.append(childSection);
    }
  }
  return section;
}

let inspectedExecId = null;
let inspectorRefreshTimer = null;

// While a run goes on, the open inspector follows it (at most about once a second).
export function refreshInspectorFor(exec) {
  if ($('inspector').hidden || !inspectedExecId) return;
  if (exec.id !== inspectedExecId && rootExec(exec).id !== inspectedExecId) return;
  if (inspectorRefreshTimer) return;
  inspectorRefreshTimer = setTimeout(() => {
    inspectorRefreshTimer = null;
    if (!$('inspector').hidden && inspectedExecId) openInspector(inspectedExecId, true);
  }, 1000);
}

/** Opens the inspector on an execution (`quiet`: a live refresh that keeps what the reader opened). */
export async function openInspector(execId, quiet) {
  inspectorGen += 1;
  const current = inspectorGen;
  inspectedExecId = execId;
  const panel = $('inspector');
  const body = $('inspector-body');
  panel.hidden = false;
  document.body.classList.add('inspector-open');
  if (!quiet) body.replaceChildren(el('p', { class: 'muted' }, 'Loading…'));
  try {
    const sessionId = view.sessionId;
    const allExecs = sessionId ? await listAll(`/v1/sessions/${sessionId}/executions`) : [];
    const section = await executionSection(execId, allExecs, current, 0);
    if (current !== inspectorGen || !section) return;
    const scrollTop = panel.scrollTop;
    // Keep what the reader had opened across a live refresh.
    const openSnapshots = new Set([...body.querySelectorAll('details.snapshot[open]')].map((d) => d.dataset.snapshotId));
    const openIo = new Set([...body.querySelectorAll('.inspect-exec')].filter((x) => x.querySelector(':scope > .inspect-io[open]')).map((x) => x.dataset.executionId));
    body.replaceChildren(section,
      el('button', { type: 'button', class: 'btn btn-small', onclick: () => openInspector(execId) }, 'Refresh'));
    if (quiet) {
      for (const d of body.querySelectorAll('details.snapshot')) if (openSnapshots.has(d.dataset.snapshotId)) d.open = true;
      for (const x of body.querySelectorAll('.inspect-exec')) {
        const io = x.querySelector(':scope > .inspect-io');
        if (io && openIo.has(x.dataset.executionId)) io.open = true;
      }
      panel.scrollTop = scrollTop;
    }
    else $('btn-inspector-close').focus();
  } catch (err) {
    if (current === inspectorGen) body.replaceChildren(el('p', { class: 'error-text' }, `Could not load the execution: ${err.message}`));
  }
}

/** Closes the inspector; a load still under way is dropped. */
export function closeInspector() {
  inspectorGen += 1;
  inspectedExecId = null;
  $('inspector').hidden = true;
  document.body.classList.remove('inspector-open');
}

/** Wires the inspector's close button. */
export function initInspector() {
  $('btn-inspector-close').addEventListener('click', closeInspector);
}
