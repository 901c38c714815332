// Without generated types every operation, parameter and answer is accepted (`any`):
// the client of a page that generates nothing keeps compiling.
import { createDataClient, createPlaneClient } from "@surface-dataplane/client";

const users = createDataClient({ baseUrl: "/api/users", getToken: () => "a token" });
const plane = createPlaneClient({ getToken: async () => "a token" });

export async function untyped(): Promise<string> {
  const page = await users.query("list", { limit: "5" });
  const other = await users.query("anything");
  const fromPlane = await plane.query("skills", "whatever", { x: 1 }, { signal: undefined });
  return `${page.rows} ${other.nested.field} ${fromPlane}`;
}
