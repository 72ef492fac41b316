/**
 * Writes docs/openapi.json from the routes' zod schemas (document.ts): `npm run openapi` after changing a route, a
 * request schema or an answer. test/openapi/document.test.ts fails while the file differs from what this writes.
 */
import { writeFileSync } from 'node:fs';
import { relative } from 'node:path';
import { OPENAPI_FILE, renderOpenApi } from './document.ts';

const text = renderOpenApi();
writeFileSync(OPENAPI_FILE, text);
console.log(`${relative(process.cwd(), OPENAPI_FILE)}: ${text.length.toLocaleString('en-US')} bytes`);
