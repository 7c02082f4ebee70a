# The .deb's paths (Debian's layout) made the RPM's (Oracle Linux, RHEL,
# Fedora: x86_64 and aarch64, where %{_libdir} is /usr/lib64). One rule a
# line; scripts/build-rpm.sh moves the files so, scripts/check-rpm.sh maps
# the .deb's list so before comparing it with the RPM's.
s#^/lib/systemd/system/#/usr/lib/systemd/system/#
s#^/usr/lib/libhugeshm\.so$#/usr/lib64/libhugeshm.so#
s#^/usr/lib/pkgconfig/#/usr/lib64/pkgconfig/#
s#^/usr/share/zsh/vendor-completions/#/usr/share/zsh/site-functions/#
