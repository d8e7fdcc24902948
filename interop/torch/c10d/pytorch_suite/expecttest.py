"""The part of the `expecttest` package (not in Debian) that PyTorch 1.13's
test utilities import: common_utils.TestCase derives from
expecttest.TestCase and reads expecttest.ACCEPT. No distributed test
compares against inline expectations, so assertExpectedInline compares
plainly and never rewrites a file."""
import unittest

ACCEPT = False


class TestCase(unittest.TestCase):
    longMessage = True

    def assertExpectedInline(self, actual, expect, skip=0):
        self.assertEqual(expect, actual)

    def assertExpectedRaisesInline(self, exc_type, callable, expect, *args, **kwargs):
        with self.assertRaises(exc_type) as ctx:
            callable(*args, **kwargs)
        self.assertEqual(expect, str(ctx.exception))
