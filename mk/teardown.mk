# The teardown role's pod-side checks (extensions/molecule/teardown/): checkpoint_verify with load=true on a
# network volume of a pod of the local pod image, over real SSH (about 50 s on an idle 2-core machine).
#   make molecule-teardown
# playbooks/teardown.yml and playbooks/audit.yml are tested by tests/e2e/test_teardown.py and test_audit.py
# (make pytest).
.PHONY: molecule-teardown

molecule-teardown: setup image
	@molecule test -s teardown

TEST_TARGETS += molecule-teardown
