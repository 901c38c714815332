// Compiled by tests/client/test_types.py against types generated from `dataplane openapi`
// (`plane.ts`, beside this file in the test's temp dir): every `@ts-expect-error` must be
// an error, or tsc fails the test (an unused directive is an error too).
import { createDataClient, createPlaneClient } from "@surface-dataplane/client";
import type { Operations } from "./plane.js";

const options = { getToken: () => "a token" };
const users = createDataClient<Operations["users"]>({ baseUrl: "/api/users", ...options });
const plane = createPlaneClient<Operations>(options);

export async function typed(): Promise<number> {
  const page = await users.query("list", { limit: 5, role: "manager" });
  const names: string[] = page.rows.map((row) => row.full_name);
  const total: number = page.total;
  const detail = await plane.query("users", "detail", { userId: 1 });
  const pdf: unknown = await plane.query("accounting", "invoicePdf", { invoiceId: 7 });
  await users.query("list"); // every parameter of list is optional

  // @ts-expect-error: limit is an integer, not a string
  await users.query("list", { limit: "5" });
  // @ts-expect-error: role is one of learner, manager, admin
  await users.query("list", { role: "owner" });
  // @ts-expect-error: no operation of that name on users
  await users.query("lisst", {});
  // @ts-expect-error: detail requires userId
  await users.query("detail", {});
  // @ts-expect-error: detail takes no parameter of that name
  await users.query("detail", { userId: 1, extra: true });
  // @ts-expect-error: no surface of that name
  await plane.query("user", "list");
  // @ts-expect-error: the operation belongs to another surface
  await plane.query("skills", "list");
  // @ts-expect-error: the result has no field of that name
  page.totl;
  // @ts-expect-error: total is a number
  const wrong: string = page.total;

  void [names, detail, pdf, wrong];
  return total;
}
