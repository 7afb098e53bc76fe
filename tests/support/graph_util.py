"""A test case base for graph-mode (tf.compat.v1 session) tests."""

from absl.testing import parameterized
import tensorflow as tf

__all__ = ['GraphTestCase']


class GraphTestCase(parameterized.TestCase):
  """Each test builds its ops in a fresh graph with its own session.

  Attributes:
    graph: the tf.Graph, default while the test runs.
    session: a tf.compat.v1.Session on it, closed after the test.
  """

  def setUp(self):
    super().setUp()
    self.graph = tf.Graph()
    context = self.graph.as_default()
    context.__enter__()
    self.addCleanup(context.__exit__, None, None, None)
    self.session = tf.compat.v1.Session(graph=self.graph)
    self.addCleanup(self.session.close)
