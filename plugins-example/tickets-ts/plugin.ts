import { plugin } from "./tickets.js";

plugin.run();
