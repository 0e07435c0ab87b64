// The SDK's pure parts, natively (`node --test`): the schema builder, template matching and
// what registration records.
import assert from 'node:assert/strict';
import { test } from 'node:test';

import { decodeAnswers, encodeAnswers } from '../src/answers.js';
import { complete, prompt, registry, resource, tool } from '../src/registry.js';
import { s } from '../src/schema.js';
import { match, variables } from '../src/uri.js';

test('schemas: required unless optional, descriptions and defaults', () => {
  const schema = s.object({
    text: s.string().describe('the text'),
    unit: s.enum(['km', 'mi']).default('km'),
    tags: s.array(s.string()).optional(),
  });
  assert.deepEqual(schema.json, {
    type: 'object',
    properties: {
      text: { type: 'string', description: 'the text' },
      unit: { enum: ['km', 'mi'], default: 'km' },
      tags: { type: 'array', items: { type: 'string' } },
    },
    required: ['text'],
  });
  assert.deepEqual(s.nullable(s.integer()).json, { anyOf: [{ type: 'integer' }, { type: 'null' }] });
  assert.throws(() => s.object({ bad: { type: 'string' } }), TypeError);
});

test('templates: simple, reserved and fragment expansions', () => {
  assert.deepEqual(match('notes://{id}', 'notes://a%20b'), { id: 'a b' });
  assert.equal(match('notes://{id}', 'notes://a/b'), null);
  assert.deepEqual(match('file://{+path}', 'file:///etc/x'), { path: '/etc/x' });
  assert.deepEqual(match('doc://{id}{#part}', 'doc://7#intro'), { id: '7', part: 'intro' });
  assert.deepEqual(variables('a://{x}/{+y}'), ['x', 'y']);
});

test('templates: values split and decode as the host splits and decodes them', () => {
  // Each variable takes the shortest non-empty value that lets the rest match (sdk/template).
  assert.deepEqual(match('x://{a}.{b}', 'x://1.2.3'), { a: '1', b: '2.3' });
  assert.deepEqual(match('f://{+dir}/{name}', 'f:///srv/a/b.txt'), { dir: '/srv/a', name: 'b.txt' });
  assert.equal(match('x://{a}.{b}', 'x://.2'), null);
  assert.deepEqual(match('x://{file.name}', 'x://n'), { 'file.name': 'n' });
  assert.deepEqual(match('x://{v}', 'x://%FF%41%e2%82%ac%zz'), { v: '\ufffdA€%zz' });
});

test('tools: schemas, wrapped primitive output, annotations, mistakes', () => {
  tool('t-count', { description: 'Count.', input: s.object({ text: s.string() }), output: s.integer(), readOnly: true }, ({ text }) => text.length);
  const t = registry.tools.get('t-count');
  assert.equal(t.wrap, true);
  assert.deepEqual(t.outputSchema, { type: 'object', properties: { result: { type: 'integer' } }, required: ['result'] });
  assert.equal(t.annotations.readOnlyHint, true);
  tool('t-none', { description: 'No arguments.' }, () => 'ok');
  assert.deepEqual(registry.tools.get('t-none').inputSchema, { type: 'object', properties: {} });
  assert.throws(() => tool('t-count', { description: '' }, () => 1), /twice/);
  assert.throws(() => tool('bad name', { description: '' }, () => 1), /not 1-128/);
  assert.throws(() => tool('t-array', { description: '', input: s.array(s.string()) }, () => 1), /s.object/);
});

test('resources, templates, prompts and completions', () => {
  resource('r://fixed', { mimeType: 'text/plain' }, () => 'x');
  resource('r://{id}', {}, ({ id }) => id);
  assert.ok(registry.resources.has('r://fixed'));
  assert.deepEqual(registry.templates.get('r://{id}').variables, ['id']);
  prompt('p', { description: 'P.', arguments: s.object({ topic: s.string().describe('what'), tone: s.string().optional() }) }, () => 'x');
  assert.deepEqual(registry.prompts.get('p').arguments, [
    { name: 'topic', description: 'what', required: true },
    { name: 'tone', description: undefined, required: false },
  ]);
  assert.throws(() => prompt('q', { description: '', arguments: s.object({ n: s.integer() }) }, () => 'x'), /s.string/);
  complete({ prompt: 'p', argument: 'tone' }, () => ['calm']);
  assert.throws(() => complete({ argument: 'x' }, () => []), /exactly one/);
});

test('answers: earlier rounds\' answers read back from the state as they were given', () => {
  const answers = new Map([
    ['elicit-0', { tag: 'elicitation', val: { action: 'accept', content: '{"sure":true}' } }],
    ['sample-1', {
      tag: 'sampling',
      val: { role: 'assistant', content: { tag: 'image', val: { data: new Uint8Array([0, 255, 1, 2, 3]), mimeType: 'image/png' } }, model: 'm' },
    }],
    ['roots-2', { tag: 'roots', val: [{ uri: 'file:///w' }, { uri: 'file:///v', name: 'v' }] }],
  ]);
  for (const size of [0, 1, 2, 3, 4, 5]) {
    const bytes = new Uint8Array(size).map((_, i) => 250 + i);
    const back = decodeAnswers(encodeAnswers(new Map([['k', bytes]]))).get('k');
    assert.deepEqual(back, bytes, `${size} bytes`);
  }
  assert.deepEqual(decodeAnswers(encodeAnswers(answers)), answers);
  for (const state of [undefined, new Uint8Array(), new TextEncoder().encode('the plugin\'s own'), new TextEncoder().encode('[1]')]) {
    assert.deepEqual(decodeAnswers(state), new Map());
  }
});
