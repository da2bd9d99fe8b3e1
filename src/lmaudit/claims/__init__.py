"""The claims judges: every claim of the four papers read against the committed experiments' results, by one verdict
rule (:mod:`lmaudit.claims.verdicts`), and ``results/CLAIMS.md`` written from the verdicts
(:mod:`lmaudit.claims.table`, :mod:`lmaudit.claims.render`). Judging is kept apart from rendering run reports
(:mod:`lmaudit.report`): a judge reads stored figures and says what they show; it draws nothing."""
