# SPDX-License-Identifier: BSD-3-Clause
# make deb: the Debian packages (debian/: nbdkit-sect4k-plugin,
# sect4k-server, sect4k-tools) from a clean copy of the tracked files
# (scripts/deb/build), with dpkg-buildpackage -b -us -uc, whose
# dpkg-checkbuilddeps names any build dependency missing (apt-get build-dep
# ./ installs them all).
#   DEB_OUT=DIR    where the .deb, .changes and .buildinfo files go
#                  (default: the parent directory, as dpkg-buildpackage)
#   DEB_WORK=DIR   the scratch copy and the build log (default build/deb)
#   DEB_JOBS=N     parallel jobs of the package build (default: auto)
DEB_OUT ?= ..
DEB_WORK ?= build/deb
DEB_JOBS ?= auto
.PHONY: deb
deb:
	@scripts/install-deps debhelper dpkg-dev
	scripts/deb/build '$(DEB_OUT)' '$(DEB_WORK)' '$(DEB_JOBS)'
