-- IMP Crimes CQ1, verbatim from IITDBGroup/IMP_EDBT26:queries/Crimes/q01/query (anchor §2.2); sketch crimes(beat), 100 fragments
select beat, year, count(id) as crime_count from crimes group by beat, year
