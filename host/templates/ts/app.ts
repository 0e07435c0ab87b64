// {{name}}: a Capsule plugin.
import { s, tool } from 'capsule-sdk';

tool('stats', {
  description: 'Count the words and lines of a text.',
  input: s.object({ text: s.string().describe('The text to measure') }),
  output: s.object({ words: s.integer(), lines: s.integer() }),
  readOnly: true,
}, ({ text }) => ({ words: text.split(/\s+/).filter(Boolean).length, lines: text.split('\n').length }));
