// The runs of the open session: one folded group of step lines per execution (subagents nested
// under their parent), its status, the question card of a paused run, the text streaming in, and
// the run bar with Cancel.

import { api, listAll } from './api.js';
import { $, el } from './dom.js';
import { clockTime, parseTime, plural } from './format.js';
import { openInspector, refreshInspectorFor } from './inspector.js';
import { isAgentStep, stepLineText, stepOf } from './metadata.js';
import {
  ACTIVE_STATUSES, FINISHED_STATUSES, appendToStream, isWorkerAgent, mayBeWorkerAgent, rootExec, scrollToBottom, showError,
  streamEl, updateEmpty, view,
} from './view.js';

/** Fired (bubbling) on a question card when the user answers it; `detail` is the answer. */
export const ANSWER_EVENT = 'stepwise:answer';

// What each execution event says about the execution's status.
const EXEC_STATUS_BY_EVENT = {
  'execution.queued': 'pending',
  'execution.started': 'running',
  'execution.paused': 'paused',
  'execution.completed': 'completed',
  'execution.failed': 'failed',
  'execution.cancelled': 'cancelled',
};

/** What the page knows and shows of one execution. */
export function newExecState(id) {
  return {
    id,
    data: null,
    status: null,
    group: null,
    groupUserCount: -1,
    stepNumbers: new Set(),
    // Each step's kind once known (from its status line, its event or its stored Step), null
    // when it could not be learnt: only agent steps count as steps (see isAgentStep).
    stepKinds: new Map(),
    // Step numbers with a status line of their own, and the lines made from step events for
    // steps without one (an external agent's or a worker's steps).
    linedSteps: new Set(),
    eventLines: new Map(),
    activity: '',
    streamNode: null,
    question: null,
    answered: false,
    failureShown: false,
    cancelShown: false,
    loading: false,
  };
}

// A status line of a run goes right after its group, so a replayed history keeps its order.
function placeAfterGroup(exec, node) {
  if (exec.group && exec.group.isConnected && exec.group.parentElement === streamEl) {
    let anchor = exec.group;
    while (anchor.nextElementSibling && anchor.nextElementSibling.dataset.statusOf === exec.id) anchor = anchor.nextElementSibling;
    node.dataset.statusOf = exec.id;
    anchor.after(node);
    updateEmpty();
    scrollToBottom(false);
  } else {
    appendToStream(node);
  }
}

/** The state of an execution of the open session, created (and its details fetched) on first mention. */
export function execState(id) {
  let exec = view.execs.get(id);
  if (!exec) {
    exec = newExecState(id);
    view.execs.set(id, exec);
    loadExecution(exec);
  }
  return exec;
}

/** Fetches an execution's details once (or again with `refresh`). */
export async function loadExecution(exec, refresh) {
  if (exec.loading || (exec.data && !refresh) || !view.sessionId) return;
  const current = view;
  exec.loading = true;
  try {
    const data = await api('GET', `/v1/executions/${exec.id}`);
    if (current.closed) return;
    setExecutionData(exec, data);
  } catch (_) {
    /* the events still drive the status */
  } finally {
    exec.loading = false;
  }
}

/** Takes in an execution as the API returned it. */
export function setExecutionData(exec, data) {
  exec.data = data;
  if (!exec.status || FINISHED_STATUSES.has(data.status) || exec.status === data.status) {
    exec.status = data.status;
  }
  if (data.status === 'failed' && data.error_message) showFailure(exec, data.error_message);
  nestUnderParent(exec);
  refreshExec(exec);
  refreshRunState();
}

/** Moves a subagent's group inside its parent's group. */
export function nestUnderParent(exec) {
  const parentId = exec.data && exec.data.parent_execution_id;
  if (!parentId || !exec.group) return;
  const parent = execState(parentId);
  const parentGroup = ensureGroup(parent, false);
  const children = parentGroup.querySelector('.exec-children');
  if (exec.group.parentElement !== children) children.append(exec.group);
  exec.group.classList.add('exec-sub');
  refreshExec(parent);
}

function ensureGroup(exec, newSegmentOnUserMessage) {
  if (exec.group && !(newSegmentOnUserMessage && exec.groupUserCount < view.userCount)) return exec.group;
  if (exec.group) exec.group.classList.add('exec-earlier');
  const summary = el('summary', { class: 'exec-summary' },
    el('span', { class: 'exec-chevron', 'aria-hidden': 'true' }),
    el('span', { class: 'exec-count' }),
    el('span', { class: 'exec-status' }),
    el('span', { class: 'exec-activity' }));
  // Folded or opened by the user: the page stops opening and folding it by itself.
  summary.addEventListener('click', () => { exec.userToggled = true; });
  const details = el('details', { class: 'exec-details' }, summary,
    el('ol', { class: 'exec-lines', 'aria-label': 'Execution steps' }),
    el('div', { class: 'exec-children' }));
  const group = el('section', { class: 'exec', 'data-execution-id': exec.id, 'aria-label': 'Agent steps' }, details,
    el('div', { class: 'exec-tools' },
      el('span', { class: 'badge badge-agent', hidden: true }),
      el('button', { type: 'button', class: 'btn btn-link btn-small exec-inspect', onclick: () => openInspector(exec.id) }, 'Inspect')));
  exec.group = group;
  exec.groups = [...(exec.groups || []), group];
  exec.groupUserCount = view.userCount;
  exec.lineCount = 0;
  // A run resumed after a question gets a new group below the answer; counts are per group.
  exec.segmentSteps = new Set();
  exec.segments = (exec.segments || 0) + 1;
  const parentId = exec.data && exec.data.parent_execution_id;
  if (parentId && view.execs.has(parentId)) {
    nestUnderParent(exec);
  } else if (exec.streamNode) {
    exec.streamNode.before(group);
  } else {
    appendToStream(group);
  }
  refreshExec(exec);
  return group;
}

/**
 * A status line of a run (an info or notification message) in the run's group. Which step it
 * belongs to, and the tool and kind of that step, come from the message's metadata
 * (`step_number`, `tool`, `kind`); the text is only shown, never parsed.
 */
export function addStepLine(exec, msg) {
  const step = stepOf(msg.metadata);
  const line = el('li', {
    class: `step-line line-${msg.role}`,
    'data-message-id': msg.id,
    'data-step-number': step.number,
    'data-tool': step.tool,
    'data-kind': step.kind,
  },
  el('span', { class: 'step-text' }, msg.content),
  el('time', { datetime: msg.created_at || '', class: 'step-time' }, clockTime(msg.created_at)));
  // The step's event came first and drew a line for it: this one takes its place.
  const drawn = step.number != null ? exec.eventLines.get(step.number) : null;
  if (drawn && drawn.isConnected) {
    drawn.replaceWith(line);
  } else {
    const group = ensureGroup(exec, true);
    if (!group.dataset.startedAt && msg.created_at) group.dataset.startedAt = msg.created_at;
    group.querySelector('.exec-lines').append(line);
    exec.lineCount = (exec.lineCount || 0) + 1;
  }
  if (step.number != null) {
    addStepNumber(exec, step.number);
    exec.stepKinds.set(step.number, step.kind);
    exec.linedSteps.add(step.number);
    exec.eventLines.delete(step.number);
  }
  refreshExec(exec);
  scrollToBottom(false);
}

// The segment of a run (see ensureGroup) a step saved at `at` belongs to: the last one begun by then.
function groupAt(exec, at) {
  let found = null;
  if (at != null) {
    for (const group of exec.groups || []) {
      const started = parseTime(group.dataset.startedAt);
      if (group.isConnected && started != null && started <= at) found = group;
    }
  }
  return found || ensureGroup(exec, true);
}

/**
 * A line for a step whose agent writes no status line of its own (a worker's or another
 * external agent's steps: the server only announces `step.completed`): the event's text and
 * the step's tool. A status line of the same step that comes later replaces it; one already
 * shown makes it unneeded. Placed by time, so a replayed history puts it in its segment.
 */
function addEventStepLine(exec, data, step) {
  if (step.number == null || exec.linedSteps.has(step.number) || exec.eventLines.has(step.number)) return;
  const at = parseTime(data.timestamp);
  const group = groupAt(exec, at);
  // The step itself, when the event carries it (`?include=step`); else the stored steps are
  // fetched (see fetchStepDetails) and the line takes their text.
  const carried = data.metadata && typeof data.metadata.step === 'object' ? data.metadata.step : null;
  const text = carried ? stepLineText(carried) : (data.content || `Step ${step.number}`);
  const line = el('li', {
    class: 'step-line line-info line-step-event',
    'data-step-number': step.number,
    'data-tool': step.tool,
  },
  el('span', { class: 'step-text' }, step.tool ? `${text} · ${step.tool}` : text),
  el('time', { datetime: data.timestamp || '', class: 'step-time' }, clockTime(data.timestamp)));
  const lines = group.querySelector('.exec-lines');
  const timeOf = (li) => parseTime(li.querySelector('time') && li.querySelector('time').getAttribute('datetime'));
  // Live, the step is the newest line; a replayed one goes before the first line after it.
  const last = lines.lastElementChild;
  const later = at == null || !last || !(timeOf(last) > at) ? null : [...lines.children].find((li) => timeOf(li) > at);
  lines.insertBefore(line, later || null);
  if (!group.dataset.startedAt && data.timestamp) group.dataset.startedAt = data.timestamp;
  exec.eventLines.set(step.number, line);
  exec.lineCount = (exec.lineCount || 0) + 1;
  if (carried) {
    line.dataset.kind = carried.kind || '';
    exec.stepKinds.set(step.number, typeof carried.kind === 'string' ? carried.kind : null);
  } else {
    scheduleStepDetails(exec);
  }
  refreshExec(exec);
  scrollToBottom(false);
}

// How long a step event waits for its own status line (a built-in agent's follows at once)
// before the page fetches the step itself.
const STEP_DETAILS_DELAY_MS = 150;

function scheduleStepDetails(exec) {
  if (exec.detailsTimer) return;
  exec.detailsTimer = setTimeout(() => {
    exec.detailsTimer = null;
    fetchStepDetails(exec);
  }, STEP_DETAILS_DELAY_MS);
}

/**
 * The lines drawn from step events (a worker's or an external agent's steps) take the text of
 * the stored steps (`model_output`, the tools called), and their kinds become known for the
 * count. One request per burst of events: a replay of many steps fetches the list once.
 */
async function fetchStepDetails(exec) {
  const waiting = () => [...exec.stepNumbers].some((n) => exec.eventLines.has(n) || !exec.stepKinds.has(n));
  if (!waiting()) return;
  if (exec.detailsLoading) {
    exec.detailsAgain = true;
    return;
  }
  const current = view;
  exec.detailsLoading = true;
  try {
    const items = await listAll(`/v1/executions/${exec.id}/steps`);
    if (current.closed) return;
    for (const stored of items) {
      const n = stored.step_number;
      if (!exec.stepKinds.has(n) || exec.stepKinds.get(n) == null) exec.stepKinds.set(n, typeof stored.kind === 'string' ? stored.kind : null);
      const line = exec.eventLines.get(n);
      if (line && line.isConnected) {
        line.querySelector('.step-text').textContent = stepLineText(stored);
        line.dataset.kind = stored.kind || '';
      }
    }
  } catch (_) {
    if (current.closed) return;
    // Counted as steps all the same: the event said a step was saved.
    for (const n of exec.stepNumbers) if (!exec.stepKinds.has(n)) exec.stepKinds.set(n, null);
  } finally {
    exec.detailsLoading = false;
  }
  refreshExec(exec);
  refreshRunState();
  if (exec.detailsAgain) {
    exec.detailsAgain = false;
    scheduleStepDetails(exec);
  }
}

function addStepNumber(exec, n) {
  exec.stepNumbers.add(n);
  if (exec.segmentSteps) exec.segmentSteps.add(n);
}

function statusText(status) {
  switch (status) {
    case 'pending': return 'queued';
    case 'running': return 'running';
    case 'paused': return 'waiting for you';
    case 'completed': return 'done';
    case 'failed': return 'failed';
    case 'cancelled': return 'cancelled';
    default: return '';
  }
}

/**
 * The agent steps of the run's current segment (see ensureGroup): the final answer, the user's
 * answer and the task are steps of the execution but not steps the agent took, and a step
 * whose kind is not known yet waits until it is.
 */
export function agentStepCount(exec) {
  let count = 0;
  for (const n of exec.segmentSteps || []) {
    if (exec.stepKinds.has(n) && isAgentStep(exec.stepKinds.get(n))) count += 1;
  }
  return count;
}

/** Updates a group's summary line: step count, status, current activity, agent badge. */
export function refreshExec(exec) {
  if (!exec.group) return;
  const stepCount = agentStepCount(exec);
  // No steps yet (or none at all): the status says what is going on.
  const label = stepCount > 0 ? plural(stepCount, 'step') : '';
  const group = exec.group;
  const status = exec.status || '';
  const activity = ACTIVE_STATUSES.has(status) ? exec.activity : '';
  const agent = exec.data && exec.data.agent_type;
  // A run waiting for a worker shows its "queued" line unfolded: nothing else says why it
  // does not start.
  const details = group.querySelector('.exec-details');
  const waiting = status === 'pending' && Boolean(agent) && isWorkerAgent(agent) && !exec.data.parent_execution_id;
  if (!exec.userToggled && waiting !== Boolean(exec.autoOpened)) {
    exec.autoOpened = waiting;
    details.open = waiting;
  }
  // Replays apply thousands of events: skip the DOM when nothing it shows changed.
  const shown = `${label}\u0001${status}\u0001${activity}\u0001${agent}`;
  if (exec.shownKey === shown && exec.shownGroup === group) return;
  exec.shownKey = shown;
  exec.shownGroup = group;
  group.querySelector('.exec-count').textContent = label;
  const statusEl = group.querySelector('.exec-status');
  statusEl.textContent = statusText(status);
  statusEl.className = `exec-status status-${status}`;
  group.dataset.status = status;
  group.querySelector('.exec-activity').textContent = activity;
  const badge = group.querySelector('.badge-agent');
  if (agent) {
    badge.hidden = false;
    badge.textContent = agent === 'demo' ? 'demo agent' : agent;
    badge.title = agent === 'demo' ? 'The built-in offline demo agent answered: no LLM is configured.' : `Agent: ${agent}`;
    badge.classList.toggle('badge-demo', agent === 'demo');
  }
  $('banner-demo').hidden = ![...view.execs.values()].some((e) => e.data && e.data.agent_type === 'demo');
}

/** The one failure line of a run, after its group. */
export function showFailure(exec, text) {
  if (exec.failureShown) return;
  exec.failureShown = true;
  const node = el('div', { class: 'line line-error', role: 'alert', 'data-execution-id': exec.id }, `Failed: ${text}`);
  if (exec.streamNode) {
    exec.streamNode.remove();
    exec.streamNode = null;
  }
  placeAfterGroup(exec, node);
}

function showQuestion(exec, text) {
  if (exec.question && exec.question.node.isConnected && !exec.question.answered) {
    exec.question.node.querySelector('.question-text').textContent = text;
    return;
  }
  const input = el('textarea', { class: 'input question-input', rows: '1', 'aria-label': 'Your answer', placeholder: 'Type your answer…' });
  const form = el('form', { class: 'question-form' }, input,
    el('button', { type: 'submit', class: 'btn btn-primary' }, 'Answer'));
  const node = el('section', { class: 'question', role: 'group', 'aria-label': 'The agent asks', 'data-execution-id': exec.id },
    el('div', { class: 'question-label' }, 'The agent asks'),
    el('div', { class: 'question-text' }, text),
    form);
  form.addEventListener('submit', (e) => {
    e.preventDefault();
    const answer = input.value.trim();
    if (!answer) return;
    input.value = '';
    // The chat sends it as the next user message (see ANSWER_EVENT there).
    node.dispatchEvent(new CustomEvent(ANSWER_EVENT, { bubbles: true, detail: answer }));
  });
  input.addEventListener('keydown', (e) => {
    if (e.key === 'Enter' && !e.shiftKey && !e.isComposing) {
      e.preventDefault();
      form.requestSubmit();
    }
  });
  // The engine posts the question as an assistant message too: the card takes its place.
  const bubble = [...streamEl.querySelectorAll(`.msg-assistant[data-execution-id="${exec.id}"]:not(.streaming)`)]
    .find((b) => b.querySelector('.bubble-body').textContent.trim() === text.trim());
  if (bubble) {
    bubble.replaceWith(node);
  } else if (exec.data && FINISHED_STATUSES.has(exec.data.status)) {
    // Replaying the history of a run that is long over: nothing to ask any more.
    return;
  } else {
    appendToStream(node);
  }
  exec.question = { node, text, answered: false };
  scrollToBottom(true);
  setTimeout(() => { if (node.isConnected && !view.closed) input.focus(); }, 0);
}

/** The question was answered: its card stays, without the answer box. */
export function retireQuestion(exec) {
  if (!exec.question || exec.question.answered) return;
  exec.question.answered = true;
  const form = exec.question.node.querySelector('.question-form');
  if (form) form.remove();
  exec.question.node.classList.add('question-answered');
}

/** Applies a status change: question card, failure or cancel line, run bar. */
export function setExecStatus(exec, status, content) {
  exec.status = status;
  if (status === 'running') exec.answered = false;
  if (FINISHED_STATUSES.has(status) && exec.streamNode) {
    exec.streamNode.remove();
    exec.streamNode = null;
  }
  if (status === 'paused') {
    showQuestion(exec, content || (exec.data && exec.data.output && exec.data.output.question) || 'The agent needs your input.');
  } else {
    retireQuestion(exec);
  }
  if (FINISHED_STATUSES.has(status) || status === 'paused') exec.activity = '';
  const isSubagent = Boolean(exec.data && exec.data.parent_execution_id);
  if (status === 'failed' && !isSubagent) showFailure(exec, content || (exec.data && exec.data.error_message) || 'the execution failed');
  if (status === 'cancelled' && !exec.cancelShown) {
    exec.cancelShown = true;
    if (!(exec.data && exec.data.parent_execution_id)) {
      placeAfterGroup(exec, el('div', { class: 'line line-cancelled', 'data-execution-id': exec.id }, 'Run cancelled.'));
    }
  }
  refreshExec(exec);
  refreshRunState();
}

function handleDelta(exec, text) {
  // Deltas are live only; once the finished message is on screen they are stale.
  if (exec.answered || FINISHED_STATUSES.has(exec.status)) return;
  if (!exec.streamNode) {
    const body = el('div', { class: 'bubble-body stream-text' });
    exec.streamNode = el('article', { class: 'msg msg-assistant streaming', 'data-role': 'assistant', 'data-execution-id': exec.id, 'aria-label': 'Assistant is writing', 'aria-busy': 'true' },
      body, el('div', { class: 'bubble-meta' }, 'writing…'));
    appendToStream(exec.streamNode);
  }
  exec.streamNode.querySelector('.stream-text').textContent += text;
  scrollToBottom(false);
}

/** Applies one session event to the executions it names. */
export function applyEvent(type, data) {
  const exec = data.execution_id ? execState(data.execution_id) : null;
  const step = stepOf(data.metadata);
  switch (type) {
    case 'message.created':
      break;
    case 'message.delta':
      if (exec) handleDelta(exec, data.content || '');
      break;
    case 'step.started':
    case 'tool.called':
    case 'tool.completed':
    case 'step.completed':
      if (exec) {
        if (step.number != null) {
          if (type === 'step.completed') {
            addStepNumber(exec, step.number);
            if (step.kind && !exec.stepKinds.has(step.number)) exec.stepKinds.set(step.number, step.kind);
          }
          exec.currentStep = step.number;
        }
        if (type === 'step.completed') exec.activity = '';
        else exec.activity = data.content || (step.tool ? `calling ${step.tool}` : '');
        if (!exec.status || exec.status === 'pending') exec.status = 'running';
        if (type === 'step.completed') addEventStepLine(exec, data, step);
        refreshExec(exec);
        refreshRunState();
        if (type === 'step.completed') refreshInspectorFor(exec);
      }
      break;
    default:
      if (exec && EXEC_STATUS_BY_EVENT[type]) {
        const status = EXEC_STATUS_BY_EVENT[type];
        setExecStatus(exec, status, data.content);
        if (FINISHED_STATUSES.has(status) || status === 'paused') {
          loadExecution(exec, true);
        }
        refreshInspectorFor(exec);
      }
  }
}

// A worker's run whose lease stopped moving: its worker went silent (killed, frozen, cut off). A
// live worker renews the lease every few seconds; once it has not moved for LEASE_SILENT_MS the run
// bar says the run waits for a worker, and when the lease runs out (then the next claim takes the
// run over from its last saved step).
const LEASE_POLL_MS = 2000;
const LEASE_SILENT_MS = 8000;
let leaseTimer = null;

// Polled while the agent list may still be loading (then a built-in run is polled a while: it
// renews its lease, so no note shows); the note itself is for a worker's run only.
function leasedRuns() {
  return topLevelExecs().filter((e) => e.status === 'running' && e.data && mayBeWorkerAgent(e.data.agent_type));
}

/** Polls the lease of the session's running worker runs while there are any. */
function watchLeases() {
  if (!leasedRuns().length) {
    if (leaseTimer) clearInterval(leaseTimer);
    leaseTimer = null;
  } else if (!leaseTimer) {
    leaseTimer = setInterval(pollLeases, LEASE_POLL_MS);
  }
}

async function pollLeases() {
  const current = view;
  const runs = leasedRuns();
  if (!runs.length) return watchLeases();
  await Promise.all(runs.map(async (exec) => {
    try {
      const data = await api('GET', `/v1/executions/${exec.id}`);
      if (current.closed) return;
      const at = data.status === 'running' ? data.lease_expires_at || null : null;
      if (!exec.lease || exec.lease.at !== at) exec.lease = { at, since: Date.now() };
    } catch (_) {
      /* the events still drive the status */
    }
  }));
  if (!current.closed) refreshRunState();
}

/** "waiting for a worker (lease expires in 9 s)" for a run whose worker stopped renewing. */
function silentWorkerNote(exec) {
  const lease = exec.lease;
  if (!exec.data || !isWorkerAgent(exec.data.agent_type)) return '';
  if (!lease || !lease.at || Date.now() - lease.since < LEASE_SILENT_MS) return '';
  const expires = parseTime(lease.at);
  if (expires === null) return '';
  const left = Math.ceil((expires - Date.now()) / 1000);
  return left > 0
    ? `waiting for a worker (lease expires in ${left} s)`
    : 'waiting for a worker (lease expired: the next claim takes it over)';
}

function topLevelExecs() {
  return [...view.execs.values()].filter((e) => !(e.data && e.data.parent_execution_id));
}

/** The run bar under the conversation: running (with the step), queued, waiting, or hidden. */
export function refreshRunState() {
  const execs = topLevelExecs();
  const active = execs.filter((e) => ACTIVE_STATUSES.has(e.status));
  const paused = execs.filter((e) => e.status === 'paused');
  const bar = $('runbar');
  if (active.length) {
    const running = active.find((e) => e.status === 'running');
    let text = running ? 'Running…' : 'Queued…';
    if (running) {
      // The same count as the run's group: the agent steps taken so far.
      const steps = agentStepCount(rootExec(running));
      if (steps) text = `Running · ${plural(steps, 'step')}`;
      const silent = silentWorkerNote(running);
      if (silent) text += ` · ${silent}`;
    } else {
      const waiting = active.find((e) => e.data && isWorkerAgent(e.data.agent_type));
      if (waiting) text = `Queued · waiting for a worker of ${waiting.data.agent_type}`;
    }
    if (active.length > 1) text += ` (${active.length - 1} more queued)`;
    $('runbar-text').textContent = text;
    bar.hidden = false;
    bar.dataset.state = 'running';
  } else if (paused.length) {
    $('runbar-text').textContent = 'Waiting for your answer';
    bar.hidden = false;
    bar.dataset.state = 'paused';
  } else {
    bar.hidden = true;
    bar.dataset.state = 'idle';
  }
  $('input').placeholder = paused.length && !active.length ? 'Answer the agent…' : 'Message the agent…';
  // "Stop and send" while a run goes or waits: the message cancels it and runs next.
  $('btn-stop-send').hidden = !active.length;
  watchLeases();
}

/** Cancels every run of the session still going or waiting (the Cancel button, Esc). */
export async function cancelRun() {
  const targets = topLevelExecs().filter((e) => ACTIVE_STATUSES.has(e.status) || e.status === 'paused');
  if (!targets.length) return;
  const current = view;
  const button = $('btn-cancel');
  button.disabled = true;
  $('runbar-text').textContent = 'Cancelling…';
  try {
    await Promise.all(targets.map(async (exec) => {
      try {
        const data = await api('POST', `/v1/executions/${exec.id}/cancel`);
        if (!current.closed && data && data.status === 'cancelled') setExecStatus(exec, 'cancelled', '');
      } catch (err) {
        if (err.status !== 409 && !current.closed) showError(`Could not cancel: ${err.message}`);
      }
    }));
  } finally {
    button.disabled = false;
    if (!current.closed) refreshRunState();
  }
}
