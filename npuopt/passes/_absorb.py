"""The shape both stage-1 fusions share: a producer absorbs the single-input layer after it."""
from collections import Counter


def absorb_followers(graph, follower_type: str, absorb) -> list:
    """For each `follower_type` layer whose input tensor has no other reader, is not a
    graph output and comes from a single-output layer, call absorb(producer, follower);
    when it returns True the follower goes and the producer writes the follower's output
    tensor, so readers and graph outputs keep their tensor. Returns the removed layers."""
    readers = Counter(t.name for node in graph.nodes for t in node.inputs)
    graph_outputs = {t.name for t in graph.output_tensors}
    producers = {t.name: node for node in graph.nodes for t in node.outputs}
    removed = []
    for follower in graph.nodes:
        if follower.type != follower_type or len(follower.inputs) != 1 or len(follower.outputs) != 1:
            continue
        between = follower.inputs[0]
        producer = producers[between.name]
        if readers[between.name] != 1 or between.name in graph_outputs or len(producer.outputs) != 1:
            continue
        if absorb(producer, follower):
            producer.outputs[0] = follower.outputs[0]
            producers[follower.outputs[0].name] = producer
            removed.append(follower)
    if removed:
        graph.nodes = [node for node in graph.nodes if all(node is not r for r in removed)]
        graph.relink()
    return removed
