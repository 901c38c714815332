-- Deterministic seed, part 1: clients, branches, users, courses, skills,
-- course_skills, user_skills.
-- No random()/now(): every value derives from generate_series + hashtext/mod
-- against the fixed anchor 2026-01-01 00:00 UTC. Intervals are built from
-- minutes only (no day/month fields) so results do not depend on TimeZone.
-- Hash idiom: mod(hashtext(key)::bigint & 2147483647, n)  -> 0..n-1

INSERT INTO lms.clients (id, name, currency, created_at) VALUES
    ('acme',     'Acme Corporation',     'USD', '2021-03-01 00:00:00+00'),
    ('globex',   'Globex Corporation',   'EUR', '2021-06-15 00:00:00+00'),
    ('initech',  'Initech',              'USD', '2022-01-10 00:00:00+00'),
    ('umbrella', 'Umbrella Corporation', 'GBP', '2022-04-20 00:00:00+00');

INSERT INTO lms.branches (id, client_id, name, region) VALUES
    ('acme-east',        'acme',     'Acme East',            'us-east'),
    ('acme-north',       'acme',     'Acme North',           'us-north'),
    ('acme-south',       'acme',     'Acme South',           'us-south'),
    ('acme-west',        'acme',     'Acme West',            'us-west'),
    ('globex-austin',    'globex',   'Globex Austin',        'amer'),
    ('globex-berlin',    'globex',   'Globex Berlin',        'emea'),
    ('globex-paris',     'globex',   'Globex Paris',         'emea'),
    ('initech-austin',   'initech',  'Initech Austin',       'amer'),
    ('initech-dallas',   'initech',  'Initech Dallas',       'amer'),
    ('initech-remote',   'initech',  'Initech Remote',       'global'),
    ('umbrella-london',  'umbrella', 'Umbrella London',      'emea'),
    ('umbrella-raccoon', 'umbrella', 'Umbrella Raccoon City','amer'),
    ('umbrella-sydney',  'umbrella', 'Umbrella Sydney',      'apac'),
    ('umbrella-tokyo',   'umbrella', 'Umbrella Tokyo',       'apac');

-- 12,000 users in contiguous id blocks per client:
-- acme 1..4800, globex 4801..7800, initech 7801..10200, umbrella 10201..12000.
INSERT INTO lms.users (id, client_id, branch_id, email, full_name, role, created_at, active)
SELECT s.id,
       s.client_id,
       s.br[1 + mod(s.h_branch, cardinality(s.br))],
       lower(s.first_name || '.' || s.last_name || '.' || s.id) || '@' || s.client_id || '.example',
       s.first_name || ' ' || s.last_name,
       CASE WHEN mod(s.h_role, 100) < 2  THEN 'admin'
            WHEN mod(s.h_role, 100) < 12 THEN 'manager'
            ELSE 'learner' END,
       timestamptz '2026-01-01 00:00:00+00'
           - (800 * 1440 + mod(s.h_created, 400 * 1440)) * interval '1 minute',
       mod(s.h_active, 100) >= 6
FROM (
    SELECT g AS id,
           cfg.client_id,
           cb.br,
           (ARRAY['Alice','Bruno','Chloe','Dmitri','Elena','Farid','Grace','Hiro','Ines','Jonas',
                  'Kara','Liam','Maya','Nikhil','Olga','Pedro','Quinn','Rosa','Samir','Tara',
                  'Umar','Vera','Wei','Ximena','Yusuf','Zoe','Aiden','Bea','Carlos','Dana'])
               [1 + mod(hashtext(g || ':fn')::bigint & 2147483647, 30)] AS first_name,
           (ARRAY['Anderson','Baker','Chen','Diaz','Evans','Fischer','Garcia','Hughes','Ivanova','Jensen',
                  'Kim','Lopez','Martin','Nguyen','Okafor','Patel','Quintero','Rossi','Smith','Tanaka',
                  'Ueda','Vargas','Weber','Xu','Yilmaz','Zhang','Brown','Costa','Dubois','Ali'])
               [1 + mod(hashtext(g || ':ln')::bigint & 2147483647, 30)] AS last_name,
           hashtext(g || ':branch')::bigint & 2147483647  AS h_branch,
           hashtext(g || ':role')::bigint & 2147483647    AS h_role,
           hashtext(g || ':created')::bigint & 2147483647 AS h_created,
           hashtext(g || ':active')::bigint & 2147483647  AS h_active
    FROM (VALUES ('acme', 1, 4800), ('globex', 4801, 7800),
                 ('initech', 7801, 10200), ('umbrella', 10201, 12000)) AS cfg(client_id, lo, hi)
    JOIN (SELECT client_id, array_agg(id ORDER BY id) AS br
          FROM lms.branches GROUP BY client_id) cb USING (client_id)
    CROSS JOIN LATERAL generate_series(cfg.lo, cfg.hi) AS g
) s;

-- 300 courses in contiguous id blocks per client:
-- acme 1..100, globex 101..180, initech 181..250, umbrella 251..300.
-- (category, topic, level) is unique per client, so titles are unique per client.
INSERT INTO lms.courses (id, client_id, code, title, category, duration_minutes, price_cents)
SELECT cfg.lo + i,
       cfg.client_id,
       upper(left(cfg.client_id, 3)) || '-' || (ARRAY['SAF','CMP','LDR','TEC','SAL','FIN','PPL','OPS'])[1 + mod(i, 8)]
           || '-' || (101 + i),
       (ARRAY[
          ARRAY['Workplace Safety','Fire Prevention','Manual Handling','First Aid','Hazard Reporting'],
          ARRAY['Data Privacy','Anti-Bribery','Code of Conduct','Export Controls','Records Retention'],
          ARRAY['Coaching Conversations','Leading Change','Delegation','Feedback Culture','Strategic Thinking'],
          ARRAY['Cloud Fundamentals','SQL for Analysts','Secure Coding','Spreadsheet Mastery','Intro to AI'],
          ARRAY['Negotiation','Consultative Selling','Account Planning','Pipeline Hygiene','Objection Handling'],
          ARRAY['Budgeting','Financial Statements','Procurement Basics','Expense Policy','Forecasting'],
          ARRAY['Inclusive Hiring','Onboarding Buddies','Performance Reviews','Wellbeing at Work','Conflict Resolution'],
          ARRAY['Lean Process','Quality Audits','Inventory Control','Vendor Management','Incident Response']
        ])[1 + mod(i, 8)][1 + mod(i / 8, 5)]
           || (ARRAY[' Essentials',' Practitioner',' Advanced'])[1 + i / 40],
       (ARRAY['Safety','Compliance','Leadership','Technology','Sales','Finance','People','Operations'])[1 + mod(i, 8)],
       30 + 15 * mod(hashtext(cfg.client_id || ':course:' || i || ':dur')::bigint & 2147483647, 31),
       4900 + 1250 * mod(hashtext(cfg.client_id || ':course:' || i || ':price')::bigint & 2147483647, 40)
FROM (VALUES ('acme', 1, 100), ('globex', 101, 80),
             ('initech', 181, 70), ('umbrella', 251, 50)) AS cfg(client_id, lo, n)
CROSS JOIN LATERAL generate_series(0, cfg.n - 1) AS i;

-- 200 skills: 50 per client (10 categories x 5), ids acme 1..50, globex 51..100,
-- initech 101..150, umbrella 151..200. Skill index j = 0..49, category = j / 5.
INSERT INTO lms.skills (id, client_id, name, category)
SELECT cfg.ord * 50 + j + 1,
       cfg.client_id,
       (ARRAY[
          'Risk Assessment','PPE Usage','Emergency Procedures','Ergonomics','Incident Investigation',
          'GDPR','Anti-Corruption','Ethics','Trade Compliance','Document Control',
          'Coaching','Change Management','Delegation','Giving Feedback','Strategic Planning',
          'Cloud Platforms','SQL','Application Security','Spreadsheets','Machine Learning',
          'Negotiation','Consultative Selling','Account Management','CRM Hygiene','Objection Handling',
          'Budgeting','Financial Analysis','Procurement','Expense Management','Forecasting',
          'Interviewing','Onboarding','Performance Management','Wellbeing','Conflict Resolution',
          'Lean','Quality Assurance','Inventory Management','Vendor Management','Incident Management',
          'Written Communication','Presenting','Active Listening','Stakeholder Management','Storytelling',
          'Time Management','Problem Solving','Critical Thinking','Collaboration','Adaptability'])[1 + j],
       (ARRAY['Safety','Compliance','Leadership','Technology','Sales','Finance','People','Operations',
              'Communication','Personal Effectiveness'])[1 + j / 5]
FROM (VALUES ('acme', 0), ('globex', 1), ('initech', 2), ('umbrella', 3)) AS cfg(client_id, ord)
CROSS JOIN LATERAL generate_series(0, 49) AS j;

-- course_skills: 2..4 per course. Courses of category c (0..7) map to the 5
-- skills of skill-category c (two distinct ones), plus up to two distinct
-- skills from the generic categories 8..9 (skill index 40..49).
INSERT INTO lms.course_skills (course_id, skill_id, weight)
SELECT c.course_id,
       c.skill_lo + CASE WHEN k < 2 THEN c.cat * 5 + mod(c.i / 8 + k, 5)
                         ELSE 40 + mod(c.h + k, 10) END,
       (ARRAY[1.00, 0.75, 0.50, 0.25])[1 + k]
FROM (
    SELECT cfg.lo + i AS course_id,
           cfg.ord * 50 + 1 AS skill_lo,
           i,
           mod(i, 8) AS cat,
           hashtext(cfg.client_id || ':course:' || i || ':skills')::bigint & 2147483647 AS h
    FROM (VALUES ('acme', 0, 1, 100), ('globex', 1, 101, 80),
                 ('initech', 2, 181, 70), ('umbrella', 3, 251, 50)) AS cfg(client_id, ord, lo, n)
    CROSS JOIN LATERAL generate_series(0, cfg.n - 1) AS i
) c
CROSS JOIN LATERAL generate_series(0, 3) AS k
WHERE k < 2 + mod(c.h, 3);

-- user_skills: 2..5 distinct skills per user (~42,000 rows), from the user's
-- own client's skills; step 11 is coprime with 50 so picks never collide.
INSERT INTO lms.user_skills (user_id, skill_id, level, assessed_at)
SELECT u.id,
       sk.lo + mod(u.h + k * 11, 50),
       1 + mod(hashtext(u.id || ':' || k || ':lvl')::bigint & 2147483647, 5),
       timestamptz '2026-01-01 00:00:00+00'
           - (1440 + mod(hashtext(u.id || ':' || k || ':assessed')::bigint & 2147483647, 540 * 1440))
             * interval '1 minute'
FROM (SELECT id, client_id, hashtext(id || ':skills')::bigint & 2147483647 AS h FROM lms.users) u
JOIN (SELECT client_id, min(id) AS lo FROM lms.skills GROUP BY client_id) sk USING (client_id)
CROSS JOIN LATERAL generate_series(0, 4) AS k
WHERE k < 2 + mod(u.h, 4);
