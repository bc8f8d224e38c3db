"""`harness upstream`: what the harness found, in a form verl's maintainers can run and merge: a self-contained
regression test in verl's CPU-test style, the candidate fix as a git-apply-able diff, and issue-ready reports."""
