// Renders TeX to HTML with the pinned KaTeX (node_modules), for tools/katex_static.py.
// Each line on stdin is a JSON list of [tex, displayMode]; for each, one line on stdout with a JSON
// list of {html} or {error}. It serves one build and exits when stdin closes.
import katex from "katex";
import readline from "node:readline";

const lines = readline.createInterface({ input: process.stdin, crlfDelay: Infinity });
lines.on("line", line => {
  if (!line.trim()) return;
  const out = JSON.parse(line).map(([tex, display]) => {
    try {
      return { html: katex.renderToString(tex, { displayMode: display, throwOnError: true, strict: "ignore" }) };
    } catch (e) {
      return { error: String(e.message || e) };
    }
  });
  process.stdout.write(JSON.stringify(out) + "\n");
});
