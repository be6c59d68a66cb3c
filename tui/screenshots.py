"""Screenshots from the TUI: an SVG beside the scenario file (else the working directory), in place
of Textual's palette entry that saves to ~/Downloads."""

from __future__ import annotations

from pathlib import Path

__all__ = ["Screenshots"]


class Screenshots:
    """Mixed into :class:`~qmodel.tui.app.QmodelApp` (before ``App``); reads its ``folder``."""

    def get_system_commands(self, screen):
        """Textual's palette commands, with its Screenshot (which saves to ~/Downloads) replaced by ours."""
        from textual.app import SystemCommand

        for cmd in super().get_system_commands(screen):
            if cmd.title != "Screenshot":
                yield cmd
        yield SystemCommand("Screenshot", "Save an SVG screenshot beside the scenario file (else the working directory)",
                            lambda: self.set_timer(0.1, self.take_screenshot))  # after the palette has closed

    def action_screenshot(self, filename: str | None = None, path: str | None = None) -> None:
        self.take_screenshot(filename, path)

    def take_screenshot(self, filename: str | None = None, path: str | None = None) -> Path | None:
        """Save an SVG of the screen in ``path``, else beside the scenario file, else in the working
        directory (the first that can be written), and say where in a notification."""
        tried: list[str] = []
        for folder in ([Path(path)] if path else []) + [self.folder, Path.cwd()]:
            try:
                out = Path(self.save_screenshot(filename, str(folder.expanduser())))
            except OSError as err:
                tried.append(f"{folder}: {err.strerror}")
                continue
            self.notify(f"Screenshot saved to {out}", timeout=8)
            return out
        self.notify("Cannot save the screenshot (" + "; ".join(tried) + ")", severity="error", timeout=8)
        return None
