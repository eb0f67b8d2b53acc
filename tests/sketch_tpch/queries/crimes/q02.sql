-- IMP Crimes CQ2, verbatim from IITDBGroup/IMP_EDBT26:queries/Crimes/q02/query (anchor §2.2); sketch crimes(beat), 100 fragments.
-- The tests run it on a small synthetic crimes table with the threshold scaled ({threshold}; 1000 in the artifact).
select district, community_area, ward, beat, count(beat) as crime_count from crimes group by district, community_area, ward, beat having count(id) > {threshold}
