"""Cloud providers: instance-type catalogs, allocatable formulas and launches."""
