from torch_fl_publish.cli import main

raise SystemExit(main())
