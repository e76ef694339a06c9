"""The SWE env: small buggy Python repos of the project's own, fixed by an agent with bash, edit and write_file, and
graded by their original unittest suites in a fresh sandbox."""
