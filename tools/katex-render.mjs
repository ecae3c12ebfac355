// Renders TeX to HTML with the pinned KaTeX (node_modules), for tools/katex_static.py.
// stdin: a JSON list of [tex, displayMode]; stdout: a JSON list of {html} or {error}.
import katex from "katex";

let input = "";
process.stdin.setEncoding("utf8");
process.stdin.on("data", chunk => { input += chunk; });
process.stdin.on("end", () => {
  const out = JSON.parse(input).map(([tex, display]) => {
    try {
      return { html: katex.renderToString(tex, { displayMode: display, throwOnError: true, strict: "ignore" }) };
    } catch (e) {
      return { error: String(e.message || e) };
    }
  });
  process.stdout.write(JSON.stringify(out));
});
