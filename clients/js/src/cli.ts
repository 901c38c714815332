#!/usr/bin/env node
/**
 * `surface-dataplane generate --openapi <file or URL> [--out <file>]`: the TypeScript types
 * of a plane's operations (see generate.ts), from `dataplane openapi --out openapi.json`
 * or a running BFF's `/openapi.json`. Without --out the types go to stdout.
 */
import { readFile, writeFile } from "node:fs/promises";
import { parseArgs } from "node:util";
import { generate } from "./generate.js";

const USAGE = "usage: surface-dataplane generate --openapi <file or URL> [--out <file>]";
const FETCH_TIMEOUT_MS = 30_000;

async function main(argv: string[]): Promise<number> {
  const { values, positionals } = parseArgs({
    args: argv,
    allowPositionals: true,
    options: { openapi: { type: "string" }, out: { type: "string" }, help: { type: "boolean" } },
  });
  if (values.help) {
    console.log(USAGE);
    return 0;
  }
  if (positionals[0] !== "generate" || positionals.length !== 1 || !values.openapi) {
    console.error(USAGE);
    return 2;
  }
  const source = values.openapi;
  let text: string;
  try {
    const document = JSON.parse(await read(source));
    text = generate(document, { source: /^https?:/.test(source) ? source : undefined });
  } catch (err) {
    console.error(`surface-dataplane: no types from ${source}: ${(err as Error).message ?? err}`);
    return 1;
  }
  if (values.out) {
    await writeFile(values.out, text);
    console.error(`surface-dataplane: wrote ${values.out}`);
  } else {
    process.stdout.write(text);
  }
  return 0;
}

async function read(source: string): Promise<string> {
  if (!/^https?:\/\//.test(source)) return readFile(source, "utf8");
  const resp = await fetch(source, { signal: AbortSignal.timeout(FETCH_TIMEOUT_MS) });
  if (!resp.ok) throw new Error(`HTTP ${resp.status}`);
  return resp.text();
}

main(process.argv.slice(2)).then(
  (code) => process.exit(code),
  (err) => {
    console.error(`surface-dataplane: ${err?.stack || err}`);
    process.exit(1);
  },
);
