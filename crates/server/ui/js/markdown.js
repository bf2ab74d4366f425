// The Markdown renderer: pure functions from text to HTML, no DOM, so Node can test them.
// Everything from the model is escaped first; only our own fixed tags are added after.

const HTML_ESCAPES = { '&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;', "'": '&#39;' };
export function escapeHtml(text) {
  return String(text).replace(/[&<>"']/g, (c) => HTML_ESCAPES[c]);
}
function unescapeHtml(text) {
  return String(text)
    .replace(/&lt;/g, '<').replace(/&gt;/g, '>').replace(/&quot;/g, '"')
    .replace(/&#39;/g, "'").replace(/&amp;/g, '&');
}

// Only these link targets survive; anything else (javascript:, data:, ...) stays plain text.
export function safeUrl(url) {
  const trimmed = String(url).trim();
  if (/[\u0000-\u001f\s]/.test(trimmed)) return null;
  if (/^(https?:|mailto:)/i.test(trimmed)) return trimmed;
  if (/^(\/(?!\/)|#|\?)/.test(trimmed)) return trimmed;
  return null;
}

// Inline Markdown on one block of text. The source is escaped first; only our own fixed tags
// are added afterwards, so model output can never inject markup.
function renderInline(text) {
  const tokens = [];
  const hold = (html) => `\u0000${tokens.push(html) - 1}\u0000`;
  let s = String(text).replace(/\u0000/g, '');
  s = s.replace(/(`+)([\s\S]*?[^`])\1(?!`)/g, (_, _ticks, code) => hold(`<code>${escapeHtml(code.trim())}</code>`));
  s = escapeHtml(s);
  s = s.replace(/\[([^\]\u0000]+)\]\(([^)\s\u0000]+)\)/g, (all, label, url) => {
    const href = safeUrl(unescapeHtml(url));
    if (!href) return all;
    return hold(`<a href="${escapeHtml(href)}" target="_blank" rel="noopener noreferrer nofollow">${label}</a>`);
  });
  s = s.replace(/\bhttps?:\/\/[^\s<\u0000]+[^\s<.,;:!?)\u0000'"]/g, (url) => {
    const href = safeUrl(unescapeHtml(url));
    if (!href) return url;
    return hold(`<a href="${escapeHtml(href)}" target="_blank" rel="noopener noreferrer nofollow">${url}</a>`);
  });
  s = s.replace(/\*\*(?=\S)([\s\S]*?\S)\*\*/g, '<strong>$1</strong>');
  s = s.replace(/(^|[^\w])__(?=\S)([\s\S]*?\S)__(?!\w)/g, '$1<strong>$2</strong>');
  s = s.replace(/(^|[^*\w])\*(?=\S)([^*]*?\S)\*(?!\*)/g, '$1<em>$2</em>');
  s = s.replace(/(^|[^_\w])_(?=\S)([^_]*?\S)_(?![_\w])/g, '$1<em>$2</em>');
  s = s.replace(/~~(?=\S)([\s\S]*?\S)~~/g, '<del>$1</del>');
  s = s.replace(/\u0000(\d+)\u0000/g, (_, n) => tokens[Number(n)]);
  return s;
}

const BLOCK_START = /^\s*(```|~~~|#{1,6}\s|>|[-*+]\s+|\d{1,9}[.)]\s+)/;

// A small, safe Markdown subset: paragraphs, headings, fenced code, lists, quotes, rules,
// emphasis, inline code, links. Returns HTML built only from escaped text.
export function renderMarkdown(source) {
  const lines = String(source == null ? '' : source).replace(/\r\n?/g, '\n').split('\n');
  let html = '';
  let i = 0;
  while (i < lines.length) {
    const line = lines[i];
    let m = line.match(/^\s*(`{3,}|~{3,})\s*([\w+#.-]*)\s*$/);
    if (m) {
      const fence = m[1];
      const body = [];
      i += 1;
      while (i < lines.length && !lines[i].trim().startsWith(fence)) {
        body.push(lines[i]);
        i += 1;
      }
      i += 1;
      const lang = m[2] ? ` data-lang="${escapeHtml(m[2])}"` : '';
      html += `<pre><code${lang}>${escapeHtml(body.join('\n'))}</code></pre>`;
      continue;
    }
    if (/^\s*$/.test(line)) {
      i += 1;
      continue;
    }
    m = line.match(/^\s*(#{1,6})\s+(.*?)\s*#*\s*$/);
    if (m) {
      const level = Math.min(6, m[1].length + 2);
      html += `<h${level}>${renderInline(m[2])}</h${level}>`;
      i += 1;
      continue;
    }
    if (/^\s*([-*_])(\s*\1){2,}\s*$/.test(line)) {
      html += '<hr>';
      i += 1;
      continue;
    }
    if (/^\s*>/.test(line)) {
      const quoted = [];
      while (i < lines.length && /^\s*>/.test(lines[i])) {
        quoted.push(lines[i].replace(/^\s*>\s?/, ''));
        i += 1;
      }
      html += `<blockquote>${renderMarkdown(quoted.join('\n'))}</blockquote>`;
      continue;
    }
    m = line.match(/^\s*([-*+]|\d{1,9}[.)])\s+/);
    if (m) {
      const ordered = /\d/.test(m[1]);
      const itemPattern = ordered ? /^\s*\d{1,9}[.)]\s+(.*)$/ : /^\s*[-*+]\s+(.*)$/;
      const items = [];
      while (i < lines.length) {
        const im = lines[i].match(itemPattern);
        if (im) {
          items.push(im[1]);
        } else if (items.length && /^\s{2,}\S/.test(lines[i])) {
          items[items.length - 1] += '\n' + lines[i].trim();
        } else {
          break;
        }
        i += 1;
      }
      const start = ordered ? parseInt(m[1], 10) : 1;
      const tag = ordered ? 'ol' : 'ul';
      const startAttr = ordered && start !== 1 ? ` start="${start}"` : '';
      html += `<${tag}${startAttr}>${items.map((it) => `<li>${renderInline(it).replace(/\n/g, '<br>')}</li>`).join('')}</${tag}>`;
      continue;
    }
    const para = [line];
    i += 1;
    while (i < lines.length && !/^\s*$/.test(lines[i]) && !BLOCK_START.test(lines[i])) {
      para.push(lines[i]);
      i += 1;
    }
    html += `<p>${para.map((p) => renderInline(p)).join('<br>')}</p>`;
  }
  return html;
}
