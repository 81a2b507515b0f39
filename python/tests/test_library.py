"""Where libwaitprep.so is looked for, and what a library that does not fit is told."""

from __future__ import annotations

import os
import unittest
from unittest import mock

import waitprep
from waitprep import library

from _support import needs_library


class Candidates(unittest.TestCase):
    def test_an_explicit_path_comes_first_and_alone(self) -> None:
        env = {"WAITPREP_LIBRARY": "/env/lib.so", "WAITPREP_LIB": "/old/lib.so"}
        self.assertEqual(library.library_candidates("/given/lib.so", env), [("argument", "/given/lib.so")])

    def test_then_waitprep_library_then_its_old_name(self) -> None:
        self.assertEqual(library.library_candidates(None, {"WAITPREP_LIBRARY": "/env/lib.so", "WAITPREP_LIB": "/old/lib.so"}), [("WAITPREP_LIBRARY", "/env/lib.so")])
        self.assertEqual(library.library_candidates(None, {"WAITPREP_LIB": "/old/lib.so"}), [("WAITPREP_LIB", "/old/lib.so")])

    def test_then_the_package_s_own_copy_then_the_node_package_beside_this_one(self) -> None:
        package = os.path.dirname(os.path.abspath(waitprep.__file__))
        node_package = os.path.dirname(os.path.dirname(package))
        found = library.library_candidates(None, {})
        self.assertEqual([where for where, _ in found], ["package", "beside", "beside"])
        self.assertEqual(found[0][1], os.path.join(package, "libwaitprep.so"))
        self.assertEqual(found[1][1], os.path.join(node_package, "build", "Release", "libwaitprep.so"))
        self.assertRegex(found[2][1], r"/prebuilds/linux-[a-z0-9_]+/libwaitprep\.so$")
        self.assertTrue(found[2][1].startswith(os.path.join(node_package, "prebuilds") + os.sep))

    def test_a_named_path_that_is_missing_is_the_error_and_nothing_else_is_tried(self) -> None:
        with mock.patch.dict(os.environ, {"WAITPREP_LIBRARY": "/nonexistent/libwaitprep.so"}):
            with self.assertRaises(waitprep.WaitprepError) as caught:
                waitprep.load_library()
        self.assertEqual(caught.exception.code, "ERR_NATIVE_UNAVAILABLE")
        self.assertIn("/nonexistent/libwaitprep.so (WAITPREP_LIBRARY): no such file", str(caught.exception))
        self.assertNotIn("build/Release", str(caught.exception))

    def test_nothing_found_says_every_place_it_looked(self) -> None:
        with mock.patch.dict(os.environ, {}, clear=True), mock.patch.object(library, "_own", return_value="/p/waitprep/libwaitprep.so"), \
                mock.patch.object(library, "_beside", return_value=["/a/build/Release/libwaitprep.so", "/a/prebuilds/linux-x64/libwaitprep.so"]):
            with self.assertRaises(waitprep.WaitprepError) as caught:
                waitprep.load_library()
        message = str(caught.exception)
        self.assertEqual(caught.exception.code, "ERR_NATIVE_UNAVAILABLE")
        for place in ("WAITPREP_LIBRARY and WAITPREP_LIB unset", "/p/waitprep/libwaitprep.so: no such file", "/a/build/Release/libwaitprep.so: no such file", "/a/prebuilds/linux-x64/libwaitprep.so: no such file", "pip install ./python"):
            self.assertIn(place, message)

    def test_a_file_that_is_not_a_library_names_itself(self) -> None:
        with self.assertRaises(waitprep.WaitprepError) as caught:
            waitprep.load_library(os.path.abspath(__file__))
        self.assertEqual(caught.exception.code, "ERR_NATIVE_UNAVAILABLE")
        self.assertIn("did not load", str(caught.exception))


@needs_library
class OwnCopy(unittest.TestCase):
    """The package's own copy (a wheel's) against the Node package's and WAITPREP_LIBRARY."""

    def test_the_package_s_own_copy_loads_before_the_node_package_s(self) -> None:
        # Both exist (two real files): the package's own is the one loaded.
        real = waitprep.load_library()._name
        with mock.patch.dict(os.environ, {}, clear=True), mock.patch.object(library, "_own", return_value=real), \
                mock.patch.object(library, "_beside", return_value=[os.path.abspath(__file__)]):
            self.assertIs(waitprep.load_library(), waitprep.load_library(real))

    def test_waitprep_library_overrides_the_package_s_own_copy(self) -> None:
        # The package's own copy is a real library here; the variable names a missing file, and that is the error.
        real = waitprep.load_library()._name
        with mock.patch.dict(os.environ, {"WAITPREP_LIBRARY": "/nonexistent/libwaitprep.so"}), mock.patch.object(library, "_own", return_value=real):
            with self.assertRaises(waitprep.WaitprepError) as caught:
                waitprep.load_library()
        self.assertIn("/nonexistent/libwaitprep.so (WAITPREP_LIBRARY): no such file", str(caught.exception))

    def test_the_first_candidate_that_exists_is_loaded_and_an_installed_copy_s_is_its_own(self) -> None:
        found = [path for _, path in library.library_candidates() if os.path.isfile(path)]
        self.assertEqual(waitprep.load_library()._name, os.path.realpath(found[0]))
        if os.environ.get("WAITPREP_TEST_INSTALLED") == "1" and not (os.environ.get("WAITPREP_LIBRARY") or os.environ.get("WAITPREP_LIB")):
            # CI's wheel stage: nothing named, so the copy the wheel carries is the one loaded.
            self.assertEqual(found[0], library._own())


@needs_library
class LoadedLibrary(unittest.TestCase):
    def test_one_file_loads_once(self) -> None:
        self.assertIs(waitprep.load_library(), waitprep.load_library())
        self.assertEqual(waitprep.load_library().wp_abi_version(), waitprep.ABI_VERSION)

    def test_the_status_numbers_agree_and_a_renumbered_one_is_named(self) -> None:
        lib = waitprep.load_library()
        spell = lambda status: library.status_name(lib, status)  # noqa: E731
        self.assertIsNone(library.status_mismatch(spell))
        renumbered = dict(waitprep._abi.STATUS, WP_MISS_EVICTING=99)
        self.assertEqual(
            library.status_mismatch(spell, renumbered), "status WP_MISS_EVICTING is 99 in this package, but the library spells 99 as WP_UNKNOWN"
        )


if __name__ == "__main__":
    unittest.main()
