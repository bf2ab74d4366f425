// Formatting of times, ids and counts for display; no DOM.

export function parseTime(text) {
  const t = Date.parse(text);
  return Number.isNaN(t) ? null : t;
}
// One formatter for all lines: toLocaleTimeString builds a new one per call, slow over
// thousands of step lines.
const clockFormat = new Intl.DateTimeFormat([], { hour: '2-digit', minute: '2-digit', second: '2-digit' });
export function clockTime(text) {
  const t = parseTime(text);
  return t == null ? '' : clockFormat.format(t);
}
export function relativeTime(text) {
  const t = parseTime(text);
  if (t == null) return '';
  const seconds = Math.round((Date.now() - t) / 1000);
  if (seconds < 45) return 'just now';
  const minutes = Math.round(seconds / 60);
  if (minutes < 60) return `${minutes} min ago`;
  const hours = Math.round(minutes / 60);
  if (hours < 24) return `${hours} h ago`;
  const days = Math.round(hours / 24);
  if (days < 30) return `${days} d ago`;
  return new Date(t).toLocaleDateString();
}
export function duration(fromText, toText) {
  const a = parseTime(fromText);
  const b = parseTime(toText);
  if (a == null || b == null) return '';
  const ms = Math.max(0, b - a);
  if (ms < 1000) return `${ms} ms`;
  if (ms < 60000) return `${(ms / 1000).toFixed(ms < 10000 ? 2 : 1)} s`;
  return `${Math.floor(ms / 60000)} min ${Math.round((ms % 60000) / 1000)} s`;
}
export function shortId(id) {
  return id ? String(id).slice(-8) : '';
}
export function plural(n, word) {
  return `${n} ${word}${n === 1 ? '' : 's'}`;
}
export function sessionLabel(session) {
  return (session && (session.title || session.name)) || 'Untitled session';
}
export function titleFrom(text) {
  const first = text.trim().split('\n')[0].trim();
  return first.length > 80 ? `${first.slice(0, 79)}…` : first;
}
export const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));
