-- Deterministic seed, part 3: invoices (3,000) and invoice_lines (~12,000).
-- Invoice ids (and numbers) increase with issued_at; issued between ~2024-01
-- and 2025-12-31. Each invoice belongs to one branch (and that branch's client)
-- and bills 2..6 lines of that client's courses. totals are summed from lines.

INSERT INTO lms.invoices (id, client_id, branch_id, number, issued_at, due_at, status, currency, total_cents)
SELECT v.id,
       v.client_id,
       v.branch_id,
       'INV-' || upper(left(v.client_id, 3)) || '-' || lpad(v.id::text, 6, '0'),
       v.issued_at,
       v.issued_at + 30 * 1440 * interval '1 minute',
       CASE WHEN v.age_minutes < 7 * 1440
                 THEN CASE WHEN mod(v.h_status, 100) < 50 THEN 'draft' ELSE 'sent' END
            WHEN v.age_minutes < 30 * 1440
                 THEN CASE WHEN mod(v.h_status, 100) < 40 THEN 'paid' ELSE 'sent' END
            ELSE CASE WHEN mod(v.h_status, 100) < 88 THEN 'paid' ELSE 'overdue' END
       END,
       v.currency,
       0
FROM (
    SELECT g AS id,
           b.client_id,
           b.id AS branch_id,
           c.currency,
           hashtext(g || ':inv_status')::bigint & 2147483647 AS h_status,
           -- spread 3,000 invoices over 720 days, oldest first, plus <5h jitter
           1440 + (3000 - g) * (720 * 1440 / 3000)
               + mod(hashtext(g || ':inv_jitter')::bigint & 2147483647, 300) AS age_minutes,
           timestamptz '2026-01-01 00:00:00+00'
               - (1440 + (3000 - g) * (720 * 1440 / 3000)
                  + mod(hashtext(g || ':inv_jitter')::bigint & 2147483647, 300)) * interval '1 minute' AS issued_at
    FROM generate_series(1, 3000) AS g
    JOIN (SELECT id, client_id, (row_number() OVER (ORDER BY id)) - 1 AS ord,
                 count(*) OVER () AS n
          FROM lms.branches) b
      ON b.ord = mod(hashtext(g || ':inv_branch')::bigint & 2147483647, b.n)
    JOIN lms.clients c ON c.id = b.client_id
) v;

INSERT INTO lms.invoice_lines (id, invoice_id, course_id, description, quantity, unit_cents)
SELECT row_number() OVER (ORDER BY l.invoice_id, l.k),
       l.invoice_id,
       co.id,
       co.title || ' (' || co.code || ') - ' || l.qty || CASE WHEN l.qty = 1 THEN ' seat' ELSE ' seats' END,
       l.qty,
       co.price_cents
FROM (
    SELECT i.id AS invoice_id,
           k,
           cc.lo + mod(i.h + k * 37, cc.n) AS course_id,
           1 + mod(hashtext(i.id || ':' || k || ':qty')::bigint & 2147483647, 20) AS qty
    FROM (SELECT id, client_id, hashtext(id || ':inv_lines')::bigint & 2147483647 AS h
          FROM lms.invoices) i
    JOIN (SELECT client_id, min(id) AS lo, count(*) AS n
          FROM lms.courses GROUP BY client_id) cc USING (client_id)
    CROSS JOIN LATERAL generate_series(0, 5) AS k
    WHERE k < 2 + mod(i.h, 5)
) l
JOIN lms.courses co ON co.id = l.course_id;

UPDATE lms.invoices i
SET total_cents = t.total
FROM (SELECT invoice_id, sum(quantity::bigint * unit_cents) AS total
      FROM lms.invoice_lines GROUP BY invoice_id) t
WHERE t.invoice_id = i.id;
