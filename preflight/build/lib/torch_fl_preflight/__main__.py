from torch_fl_preflight.main import main

raise SystemExit(main())
