// The page's context: what the embedding page says the chat is about (query parameters), and
// the open session's id kept in the URL.

export const params = new URLSearchParams(location.search);
export const pageContext = {
  related_type: params.get('related_type') || null,
  related_id: params.get('related_id') || null,
  context_url: canonicalUrl(params.get('context_url')),
};

// The server stores context URLs in their canonical (WHATWG) form; compare like with like.
function canonicalUrl(text) {
  if (!text) return null;
  try {
    return new URL(text).href;
  } catch {
    return text;
  }
}

export function setSessionInUrl(sessionId) {
  const url = new URL(location.href);
  if (sessionId) url.searchParams.set('session', sessionId);
  else url.searchParams.delete('session');
  history.replaceState(null, '', url);
}
