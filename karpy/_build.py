"""What a build stamps into karpy: the commit a container image was built from (the Dockerfile's build stage
rewrites this file from its ``KARPY_COMMIT`` argument). Empty in a source checkout."""

COMMIT = ""
