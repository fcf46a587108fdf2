"""The domain model: report.py (the pieces every report is made of, and the single-profile report), runmodel.py
(the multi-rank run), comparemodel.py (the comparison)."""
