// Type-level checks of the SDK's inference (`tsc --noEmit -p test`): each @ts-expect-error
// must be an error, so wrong handler code does not compile.
import { s, tool } from 'capsule-sdk';

tool('typed', {
  description: 'Types flow from the schemas to the handler.',
  input: s.object({ text: s.string(), times: s.integer().optional() }),
  output: s.object({ out: s.string() }),
}, ({ text, times }) => {
  const n: number | undefined = times;
  // @ts-expect-error `text` is a string
  const wrong: number = text;
  return { out: text.repeat(n ?? 1) + String(wrong) };
});

// @ts-expect-error the output must match its schema
tool('mismatch', { description: '', input: s.object({}), output: s.object({ out: s.string() }) }, () => ({ out: 1 }));
