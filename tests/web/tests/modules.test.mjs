// Unit tests of the UI's pure modules, run by Node itself (no browser, no server): the
// Markdown renderer and the readers of message metadata.
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { escapeHtml, renderMarkdown, safeUrl } from '../../../crates/server/ui/js/markdown.js';
import { isAgentStep, messageFromEvent, stepLineText, stepOf } from '../../../crates/server/ui/js/metadata.js';

describe('markdown.js', () => {
  it('escapes every tag in the source and adds only its own', () => {
    const html = renderMarkdown('<script>alert(1)</script> **bold** <img src=x onerror=alert(1)>');
    assert.equal(html, '<p>&lt;script&gt;alert(1)&lt;/script&gt; <strong>bold</strong> &lt;img src=x onerror=alert(1)&gt;</p>');
  });

  it('renders headings, lists, fenced code and quotes', () => {
    assert.equal(renderMarkdown('# Title'), '<h3>Title</h3>');
    assert.equal(renderMarkdown('3. c\n4. d'), '<ol start="3"><li>c</li><li>d</li></ol>');
    assert.equal(renderMarkdown('```js\na < b\n```'), '<pre><code data-lang="js">a &lt; b</code></pre>');
    assert.equal(renderMarkdown('> quoted _text_'), '<blockquote><p>quoted <em>text</em></p></blockquote>');
  });

  it('keeps links only to safe targets', () => {
    assert.match(renderMarkdown('[ok](https://example.org/?a=1&b=2)'), /<a href="https:\/\/example.org\/\?a=1&amp;b=2" target="_blank" rel="noopener noreferrer nofollow">ok<\/a>/);
    assert.equal(renderMarkdown('[bad](javascript:alert(1))'), '<p>[bad](javascript:alert(1))</p>');
    assert.equal(safeUrl('data:text/html,x'), null);
    assert.equal(safeUrl('/v1/sessions'), '/v1/sessions');
    assert.equal(escapeHtml(`<a href="x" title='y'>&</a>`), '&lt;a href=&quot;x&quot; title=&#39;y&#39;&gt;&amp;&lt;/a&gt;');
  });
});

describe('metadata.js', () => {
  it('reads the step number, tool and kind, and nothing from elsewhere', () => {
    assert.deepEqual(stepOf({ step_number: 4, tool: 'search', kind: 'tool_call' }), { number: 4, tool: 'search', kind: 'tool_call' });
    assert.deepEqual(stepOf({ step_number: 2, kind: 'final_answer' }), { number: 2, tool: null, kind: 'final_answer' });
    for (const missing of [undefined, null, {}, { step_number: '3' }, { step_number: 1.5 }, { step_number: -1 }, 'Step 3: x']) {
      assert.deepEqual(stepOf(missing), { number: null, tool: null, kind: null }, JSON.stringify(missing));
    }
  });

  it('turns a live message.created event into the message the API would return', () => {
    const msg = messageFromEvent({
      session_id: 's', message_id: 'm', execution_id: 'e', event_type: 'message.created', content: 'Looked it up',
      metadata: { role: 'info', step_number: 5, tool: 'search', kind: 'tool_call' }, timestamp: '2026-01-06T12:34:56Z',
    });
    assert.deepEqual(msg, {
      id: 'm', session_id: 's', role: 'info', content: 'Looked it up', execution_id: 'e',
      related_type: null, related_id: null, context_url: null,
      metadata: { step_number: 5, tool: 'search', kind: 'tool_call' }, created_at: '2026-01-06T12:34:56Z',
    });
    assert.deepEqual(stepOf(msg.metadata), { number: 5, tool: 'search', kind: 'tool_call' });
  });

  it("counts only the agent's steps: not the final answer, the user's answer or the task", () => {
    for (const kind of ['action', 'planning', 'subagent', null, undefined, 'tool_call']) assert.equal(isAgentStep(kind), true, String(kind));
    for (const kind of ['final_answer', 'user_input', 'task', 'system_prompt']) assert.equal(isAgentStep(kind), false, kind);
  });

  it("words a stored step's line like a built-in agent's", () => {
    assert.equal(stepLineText({ step_number: 1, kind: 'action', model_output: 'Reading the message\nmore', tool_calls: [] }), 'Step 1: Reading the message');
    assert.equal(stepLineText({ step_number: 2, kind: 'action', model_output: 'Echoing it', tool_calls: [{ id: 'c', name: 'echo', arguments: {} }] }), 'Step 2: called echo · Echoing it');
    assert.equal(stepLineText({ step_number: 3, kind: 'final_answer', output: 'x' }), 'Step 3: final answer');
    assert.equal(stepLineText({ step_number: 4, kind: 'action', error: { kind: 'tool_error', message: 'boom' } }), 'Step 4: failed: boom');
    assert.equal(stepLineText({ step_number: 5, kind: 'action', model_output: 'x'.repeat(500) }).length, 'Step 5: '.length + 160);
    assert.equal(stepLineText({ step_number: 6 }), 'Step 6');
  });
});
