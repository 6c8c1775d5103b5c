// dist/cjs holds CommonJS files in a "type": "module" package: say so, for Node and bundlers.
import { writeFileSync } from "node:fs";
writeFileSync(new URL("../dist/cjs/package.json", import.meta.url), '{ "type": "commonjs" }\n');
