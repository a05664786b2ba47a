"""The frame path, per camera, in the order a frame takes it:

    capture    scheduler.py   the newest frame of each camera's ring, cameras taken in turn (latest wins)
    inference  framepath.py   the frame into the ensemble the router names (``Model``), in place in the ring
    results    results.py     the ensemble's outputs as the frame's ``DetectionsMessage``
    analytics  eventstage.py  the camera's tracker, zones and lines: track ids, events, counts
                              (layouts.py: where the zones and lines come from; snapshots.py: the event's frame)
    sinks      sink.py        one interface for every consumer of results; the frame tap for those that ask
               sinks.py       MQTT, the page, OPC UA, the restream; clipkeeper.py: the events' clips

``supervisor.running.start_inference`` puts it together; ``result_sinks`` there is the list of sinks.
"""
