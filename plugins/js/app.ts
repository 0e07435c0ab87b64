// Capsule's TypeScript example plugin: every kind of thing a plugin can provide, written with
// the JavaScript/TypeScript SDK (`sdk/js`). Build: `npx capsule-js build app.ts -o js.wasm`.
import { assistant, complete, fs, NotFound, prompt, resource, s, tool, user } from 'capsule-sdk';

tool('stats', {
  description: 'Count the words and lines of a text and find its longest word.',
  input: s.object({ text: s.string().describe('The text to measure') }),
  output: s.object({ words: s.integer(), lines: s.integer(), longest: s.string() }),
  readOnly: true,
}, ({ text }) => {
  const words = text.split(/\s+/).filter(Boolean);
  const longest = words.reduce((a, b) => (b.length > a.length ? b : a), '');
  return { words: words.length, lines: text.split('\n').length, longest };
});

tool('convert', {
  description: 'Convert a distance to the other unit (km to miles or miles to km).',
  input: s.object({ value: s.number(), unit: s.enum(['km', 'mi'] as const).default('km') }),
  output: s.number(),
}, ({ value, unit = 'km' }) => Math.round((unit === 'km' ? value / 1.609344 : value * 1.609344) * 1e6) / 1e6);

tool('countdown', {
  description: 'Count down from n, logging and reporting progress at each step.',
  input: s.object({ n: s.integer() }),
}, ({ n }, ctx) => {
  for (let i = 0; i < n; i++) {
    ctx.info(`${n - i} to go`);
    ctx.progress(i + 1, n, `step ${i + 1}`);
  }
  return 'lift-off';
});

tool('shred', {
  description: 'Pretend to shred a document, after asking the user to confirm.',
  input: s.object({ name: s.string() }),
  destructive: true,
}, ({ name }, ctx) => {
  const answer = ctx.elicit(`Really shred ${name}?`, s.object({ sure: s.boolean() }));
  if (answer.action !== 'accept' || !answer.content?.sure) return `kept ${name}`;
  // A second question: the first one's answer is still known when this one is answered.
  const backups = ctx.elicit(`Shred the backups of ${name} too?`, s.object({ backups: s.boolean() }));
  return backups.action === 'accept' && backups.content?.backups ? `shredded ${name} and its backups` : `shredded ${name}`;
});

tool('read_file', {
  description: 'Read a text file inside a directory the host granted (nothing else exists).',
  input: s.object({ path: s.string() }),
  readOnly: true,
}, ({ path }) => fs.readTextFile(path));

tool('fail', {
  description: 'Throw an error with the given message (shows how errors reach the model).',
  input: s.object({ message: s.string() }),
}, ({ message }) => {
  throw new RangeError(message);
});

const NOTES: Record<string, string> = {
  welcome: 'Capsule runs this JavaScript plugin in a fresh sandbox for every call.',
  limits: 'Each call has a CPU deadline and a memory cap.',
};

resource('notes://index', { name: 'index', description: 'The names of all notes.', mimeType: 'text/plain' },
  () => Object.keys(NOTES).sort().join('\n'));

resource('notes://{name}', { name: 'note', description: 'One note, by name.', mimeType: 'text/plain' }, ({ name }) => {
  if (!(name in NOTES)) throw new NotFound(`no note ${name}`);
  return NOTES[name];
});

complete({ template: 'notes://{name}', argument: 'name' },
  (value) => Object.keys(NOTES).sort().filter((n) => n.startsWith(value)));

prompt('review', {
  description: 'Ask for a careful code review.',
  arguments: s.object({ code: s.string(), language: s.string().optional() }),
}, ({ code, language = 'python' }) => [
  user(`Please review this ${language} code:\n\n${code}`),
  assistant('I will look for bugs first, then style.'),
]);

complete({ prompt: 'review', argument: 'language' },
  (value) => ['c', 'javascript', 'python', 'rust', 'typescript'].filter((l) => l.startsWith(value)));
