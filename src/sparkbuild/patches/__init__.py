"""Stage 2, patches: the series applied to a tree, all or nothing.

The series file and its patches (:mod:`.series`), structured edits (:mod:`.edits`), the
engine that feeds every change to ``git apply`` (:mod:`.engine`), the journal that lets
the next run restore a tree a killed run left (:mod:`.journal`), the report
(:mod:`.report`), and ``prepare`` (:mod:`.prepare`), which runs sources and the series
into a new directory.  It hands :mod:`sparkbuild.vendoring` and the checks a prepared tree
and a :class:`~.report.SeriesReport` that says what each patch did.
"""
