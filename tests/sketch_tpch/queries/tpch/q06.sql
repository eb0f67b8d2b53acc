-- IMP TPC-H Q6, verbatim from IITDBGroup/IMP_EDBT26:queries/tpch1g/q06/query (via the anchor note §2.1)
select sum((l_extendedprice * l_discount)::float)::float as revenue FROM lineitem WHERE l_shipdate >= TO_DATE('1994-01-01', 'YYYY-MM-DD') AND l_shipdate < TO_DATE('1995-01-01', 'YYYY-MM-DD') AND l_discount > 0.05 AND l_discount < 0.07 AND l_quantity < 24
