# The two commands of the README. Each does all of its own set-up on a fresh machine.
.PHONY: quickstart test setup clean

setup:
	@bash infra/setup.sh

quickstart:
	@bash infra/setup.sh quickstart
	.venv/bin/swe-rlvr quickstart

test: setup
	bash infra/test.sh

clean:
	rm -rf runs .pytest_cache
