from appliance.commands.main import main

# Guarded: capture processes use the "spawn" start method, which re-imports __main__ in each child.
if __name__ == "__main__":
    raise SystemExit(main())
