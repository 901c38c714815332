-- Statements of the `accounting` surface (dataplane/surfaces/accounting.py),
-- run over the read-only client DB, scoped by client and branches. Money is
-- integer cents plus a currency; timestamps come out as ISO-8601 UTC text.

-- name: accounting_invoices_list
-- One page of invoices in scope, newest first (optional status / branch filters).
SELECT i.id, i.number, i.branch_id,
       to_char(i.issued_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS"Z"') AS issued_at,
       to_char(i.due_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS"Z"') AS due_at,
       i.status, i.currency::text AS currency, i.total_cents,
       (SELECT count(*) FROM lms.invoice_lines l WHERE l.invoice_id = i.id) AS line_count
FROM lms.invoices i
WHERE i.client_id = %(client)s
  AND ('*' = ANY(%(branches)s::text[]) OR i.branch_id = ANY(%(branches)s::text[]))
  AND (%(branch)s::text IS NULL OR i.branch_id = %(branch)s::text)
  AND (%(status)s::text IS NULL OR i.status = %(status)s::text)
ORDER BY i.issued_at DESC, i.id DESC
LIMIT %(limit)s OFFSET %(offset)s;

-- name: accounting_totals_by_status
-- Invoice count and total cents per status and currency, same filters as the list.
SELECT i.status, i.currency::text AS currency, count(*) AS invoices,
       sum(i.total_cents)::bigint AS total_cents
FROM lms.invoices i
WHERE i.client_id = %(client)s
  AND ('*' = ANY(%(branches)s::text[]) OR i.branch_id = ANY(%(branches)s::text[]))
  AND (%(branch)s::text IS NULL OR i.branch_id = %(branch)s::text)
  AND (%(status)s::text IS NULL OR i.status = %(status)s::text)
GROUP BY i.status, i.currency
ORDER BY i.status, i.currency;

-- name: accounting_invoice_get
-- One invoice's header in scope, with client and branch names (no row: not found in scope).
SELECT i.id, i.number, i.client_id, cl.name AS client_name, i.branch_id,
       b.name AS branch_name,
       to_char(i.issued_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS"Z"') AS issued_at,
       to_char(i.due_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS"Z"') AS due_at,
       i.status, i.currency::text AS currency, i.total_cents
FROM lms.invoices i
JOIN lms.clients cl ON cl.id = i.client_id
JOIN lms.branches b ON b.id = i.branch_id
WHERE i.id = %(invoice_id)s
  AND i.client_id = %(client)s
  AND ('*' = ANY(%(branches)s::text[]) OR i.branch_id = ANY(%(branches)s::text[]));

-- name: accounting_invoice_lines_list
-- The lines of one invoice in scope, in order, with course codes and line totals.
SELECT l.id AS line_id, l.course_id, c.code AS course_code, l.description,
       l.quantity, l.unit_cents, l.quantity::bigint * l.unit_cents AS line_total_cents
FROM lms.invoices i
JOIN lms.invoice_lines l ON l.invoice_id = i.id
LEFT JOIN lms.courses c ON c.id = l.course_id
WHERE i.id = %(invoice_id)s
  AND i.client_id = %(client)s
  AND ('*' = ANY(%(branches)s::text[]) OR i.branch_id = ANY(%(branches)s::text[]))
ORDER BY l.id;
