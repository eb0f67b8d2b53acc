-- IMP synthetic query shapes (IITDBGroup/IMP_EDBT26:queries/synthetic_small/qNN/query, anchor §2.3).
-- One query per line: "<name>: <sql>". Sketch on attribute a of the first table. Thresholds as in the artifact.
q01_having0: select a, avg(b) as ab from r500 group by a
q02_having1: select a, avg(b) as ab from r500 group by a having avg(c) < 1000
q03_having2: select a, avg(b) as ab from r500 group by a having avg(c) < 1000 and avg(d) < 1200
q17_having8: select a, avg(b) as ab from r500 group by a having avg(c) < 1000 and avg(d) < 1200 and avg(e) > 0 and avg(f) > 0 and avg(g) > 0 and avg(h) > 0 and avg(i) > 0 and avg(j) > 0
q04_groups: select a, avg(b) as ab from t1gb1000g group by a having avg(c) < 320
q06_selpd: select a, avg(b) as ab from t1gb1000g where b < 1000 group by a having avg(c) < 300
q13_join: select a, avg(b) as ab from (select a as a, b as b, c as c from t1gbjoin where b < 1000) tt join tjoinhelp on (a = ttid) group by a having avg(c) < 1000
q31_joinsel: select a, avg(b) as ab from t1gbjoin join tjoinhelppercent5 on (a = ttid) where b < 1000 group by a having avg(c) < 1000
