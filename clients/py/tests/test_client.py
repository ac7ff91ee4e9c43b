"""The package's pure parts: delays, cursors' blocks, subscription keys."""

import unittest

from chainsieve_client import Backoff, backoff_delay, cursor_block, subscription_key
from chainsieve_client.provider import _is_options


class BackoffTest(unittest.TestCase):
    def test_delays_double_up_to_the_maximum_with_jitter_in_the_upper_half(self):
        backoff = Backoff(initial=0.25, maximum=30.0)
        self.assertEqual(backoff_delay(backoff, 0, lambda: 0.0), 0.125)
        self.assertEqual(backoff_delay(backoff, 0, lambda: 1.0), 0.25)
        self.assertEqual(backoff_delay(backoff, 3, lambda: 1.0), 2.0)
        self.assertEqual(backoff_delay(backoff, 40, lambda: 1.0), 30.0)
        self.assertEqual(backoff_delay(backoff, 40, lambda: 0.0), 15.0)


class CursorTest(unittest.TestCase):
    def test_the_block_a_cursor_names(self):
        self.assertEqual(cursor_block("eth:12@118:3:99"), 118)
        self.assertEqual(cursor_block("eth:@118:0:99"), 118)
        self.assertIsNone(cursor_block("eth:12:0:99"), "a pending step names none")
        self.assertIsNone(cursor_block("nonsense"))


class KeyTest(unittest.TestCase):
    def test_keys_are_the_javascript_packages(self):
        # JSON.stringify([topic, filter]) and with {finality}.
        self.assertEqual(
            subscription_key(["logs", {"address": "0xab"}], None),
            '["logs",{"address":"0xab"}]',
        )
        self.assertEqual(
            subscription_key(["newHeads"], "safe"), '["newHeads",{"finality":"safe"}]'
        )

    def test_only_an_object_of_options_is_the_options(self):
        self.assertTrue(_is_options({"resumeFrom": "eth:1@1:0:1"}))
        self.assertFalse(_is_options({"address": "0xab"}), "a logs filter")
        self.assertFalse(_is_options({}))
        self.assertFalse(_is_options(True))


if __name__ == "__main__":
    unittest.main()
