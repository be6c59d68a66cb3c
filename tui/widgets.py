"""Textual widgets of the what-if app: the scenario form, plot canvases and small dialogs."""

from __future__ import annotations

from typing import Callable

from rich.text import Text
from textual import on
from textual.app import ComposeResult
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.message import Message
from textual.screen import ModalScreen
from textual.suggester import SuggestFromList
from textual.widget import Widget
from textual.binding import Binding
from textual.reactive import reactive
from textual.widgets import Button, Input, Label, OptionList, Static

from .layout import minimum_width
from .form import FIELD_BY_KEY, FIELDS, SECTIONS, FieldSpec, visible

__all__ = ["Chart", "Choice", "ScenarioForm", "CatalogPicker", "PathPrompt", "TableView"]


def _dom_id(key: str) -> str:
    return "f-" + key.replace(".", "-").replace("_", "-")


class TableView(Static):
    """A Static for tables: never narrower than its content's minimum (:func:`qmodel.tui.layout.minimum_width`),
    so a table that cannot fit scrolls sideways in its container instead of cutting numbers."""

    def update(self, content: object = "", *, layout: bool = True) -> None:  # type: ignore[override]
        super().update(content, layout=layout)  # type: ignore[arg-type]
        self.styles.min_width = None if isinstance(content, str) else minimum_width(self.app.console, content)


class Chart(Widget):
    """A canvas that redraws a plot function at its current size (braille/block text)."""

    DEFAULT_CSS = "Chart { height: 12; }"

    def __init__(self, placeholder: str = "", **kw) -> None:
        super().__init__(**kw)
        self._draw: Callable[[int, int], Text] | None = None
        self._placeholder = placeholder

    def plot(self, draw: Callable[[int, int], Text] | None, placeholder: str | None = None) -> None:
        self._draw = draw
        if placeholder is not None:
            self._placeholder = placeholder
        self.refresh()

    def render(self) -> Text:
        w, h = self.content_size.width, self.content_size.height
        if self._draw is None or w < 8 or h < 3:
            return Text(self._placeholder, style="dim")
        return self._draw(w, h)


class Choice(Widget, can_focus=True):
    """A one-line choice: Enter/click opens a searchable list, Left/Right step through the options.

    Used instead of Textual's Select, which is several widgets each; the form has 17 of these and
    start-up time follows the widget count.
    """

    DEFAULT_CSS = """
    Choice { height: 1; width: 1fr; background: $boost; }
    Choice:focus { background: $block-cursor-background; color: $block-cursor-foreground; }
    """
    BINDINGS = [Binding("enter,space", "open", "Choose", show=False),
                Binding("left", "step(-1)", show=False), Binding("right", "step(1)", show=False)]

    value: reactive[str] = reactive("")

    class Changed(Message):
        def __init__(self, choice: "Choice", value: str) -> None:
            super().__init__()
            self.choice = choice
            self.value = value

        @property
        def control(self) -> "Choice":
            return self.choice

    def __init__(self, options: list[str], value: str = "", *, title: str = "", placeholder: str = "", **kw) -> None:
        super().__init__(**kw)
        self.options = list(options)
        self.title = title
        self.placeholder = placeholder
        self.set_reactive(Choice.value, value)

    def render(self) -> Text:
        shown = Text(self.value) if self.value else Text(self.placeholder, style="dim")
        w = self.content_size.width
        shown.truncate(max(w - 2, 1))
        shown.pad_right(max(w - 2 - len(shown), 0))
        return shown + Text(" ▼", style="dim")

    def watch_value(self, old: str, new: str) -> None:
        if old != new:
            self.post_message(self.Changed(self, new))

    def set_options(self, options: list[str]) -> None:
        self.options = list(options)
        self.refresh()

    def action_open(self) -> None:
        if not self.options:
            return
        blank = f"({self.placeholder or 'none'})"  # a blank option (an optional field left out), named in the list

        def chosen(v: str | None) -> None:
            if v is not None:
                self.value = "" if v == blank else v

        shown = [o or blank for o in self.options]
        self.app.push_screen(CatalogPicker(self.title or "an option", shown, self.value or blank), chosen)

    def action_step(self, delta: int) -> None:
        if not self.options:
            return
        i = self.options.index(self.value) if self.value in self.options else -1
        self.value = self.options[(i + delta) % len(self.options)]

    def on_click(self) -> None:
        self.action_open()


class FieldRow(Widget):
    """Label, input (text, select or catalog name with a picker) and, when needed, an error line.

    One grid per field (label | input | picker) instead of nested containers, and the error line
    mounted only when there is an error: the form has ~60 fields, and widget count is what sets
    the app's start-up time.
    """

    DEFAULT_CSS = """
    FieldRow { layout: grid; grid-size: 3; grid-columns: 13 1fr 3; grid-rows: 1 auto; height: auto; }
    FieldRow.-select, FieldRow.-text { grid-size: 2; grid-columns: 13 1fr; }
    FieldRow > .field-error { column-span: 3; height: auto; padding-left: 2; }
    """

    def __init__(self, spec: FieldSpec, names: list[str], value: str) -> None:
        kind = "-catalog" if spec.kind == "catalog" else "-select" if spec.kind == "select" else "-text"
        super().__init__(id=_dom_id(spec.key) + "-row", classes=f"field-row {kind}")
        self.spec = spec
        self.names = names
        self.value = value
        self._error: Static | None = None

    def compose(self) -> ComposeResult:
        s = self.spec
        yield Label(s.label, classes="field-label")
        if s.kind == "select":
            choice = Choice(list(s.options), self.value if self.value in s.options else s.options[0], title=s.label,
                            placeholder="default" if s.optional else "", id=_dom_id(s.key), classes="field-input")
            choice.tooltip = s.help or None
            yield choice
        else:
            sugg = SuggestFromList(self.names, case_sensitive=False) if s.kind == "catalog" else None
            yield Input(self.value, id=_dom_id(s.key), suggester=sugg, compact=True, classes="field-input",
                        placeholder="default" if s.optional else "", tooltip=s.help or None)
            if s.kind == "catalog":
                yield Button("…", id=_dom_id(s.key) + "-pick", classes="pick", compact=True,
                             tooltip=f"search the {s.catalog} catalog")

    @property
    def error(self) -> str:
        return "" if self._error is None else str(self._error.render())

    def show_error(self, msg: str) -> None:
        if msg == self.error:
            return
        if self._error is None:
            self._error = Static("", classes="field-error")
            self.mount(self._error)
        self._error.update(Text(msg, style="red"))
        self._error.display = bool(msg)
        self.set_class(bool(msg), "invalid")


class ScenarioForm(VerticalScroll):
    """Every scenario field, grouped by section; hides fields that do not apply to the choices."""

    class Changed(Message):
        """The user changed a field (not sent while the app loads values)."""

        def __init__(self, values: dict[str, str], key: str) -> None:
            super().__init__()
            self.values = values
            self.key = key

    def __init__(self, names: dict[str, list[str]], values: dict[str, str], **kw) -> None:
        super().__init__(**kw)
        self._names = names
        self._values: dict[str, str] = dict(values)
        # Widgets announce their initial values while mounting; those are not user edits.
        self._loading = 1

    def compose(self) -> ComposeResult:
        for section in SECTIONS:
            yield Static(section, classes="section")
            for spec in FIELDS:
                if spec.section == section:
                    yield FieldRow(spec, self._names.get(spec.catalog, []), self._values.get(spec.key, ""))

    def on_mount(self) -> None:
        self.update_visibility()
        self.call_after_refresh(self._release)

    # ---- values -------------------------------------------------------------------------------
    @property
    def values(self) -> dict[str, str]:
        return dict(self._values)

    def set_values(self, values: dict[str, str]) -> None:
        """Fill every field without emitting Changed (loading a file, a plan or a pinned scenario)."""
        self._loading += 1
        try:
            self._values = dict(values)
            for spec in FIELDS:
                w = self.query_one("#" + _dom_id(spec.key))
                v = values.get(spec.key, "")
                if isinstance(w, Choice):
                    if v in spec.options and w.value != v:
                        w.value = v
                elif isinstance(w, Input) and w.value != v:
                    w.value = v
            self.update_visibility()
        finally:
            # Input/Choice post their Changed messages asynchronously; release the guard after them.
            self.call_after_refresh(self._release)

    def _release(self) -> None:
        self._loading = max(0, self._loading - 1)

    def set_value(self, key: str, value: str) -> None:
        """Set one field as if the user typed it (emits Changed)."""
        w = self.query_one("#" + _dom_id(key))
        w.value = value

    def update_visibility(self) -> None:
        for spec in FIELDS:
            row = self.query_one("#" + _dom_id(spec.key) + "-row")
            row.display = visible(spec, self._values)

    def show_errors(self, errors: dict[str, str]) -> None:
        for spec in FIELDS:
            self.query_one("#" + _dom_id(spec.key) + "-row", FieldRow).show_error(errors.get(spec.key, ""))

    def _changed(self, key: str, value: str) -> None:
        if self._values.get(key) == value:
            return
        self._values[key] = value
        if FIELD_BY_KEY[key].kind == "select":
            self.update_visibility()
        if not self._loading:
            self.post_message(self.Changed(dict(self._values), key))

    @staticmethod
    def _key(widget_id: str | None) -> str | None:
        if not widget_id:
            return None
        for spec in FIELDS:
            if _dom_id(spec.key) == widget_id:
                return spec.key
        return None

    @on(Input.Changed)
    def _input_changed(self, event: Input.Changed) -> None:
        key = self._key(event.input.id)
        if key and event.value == event.input.value:  # a stale event from an earlier programmatic set
            event.stop()
            self._changed(key, event.value)

    @on(Choice.Changed)
    def _choice_changed(self, event: Choice.Changed) -> None:
        key = self._key(event.choice.id)
        if key and event.value == event.choice.value:
            event.stop()
            self._changed(key, event.value)

    @on(Button.Pressed, ".pick")
    def _pick(self, event: Button.Pressed) -> None:
        event.stop()
        key = self._key((event.button.id or "").removesuffix("-pick"))
        if key is None:
            return
        spec = FIELD_BY_KEY[key]

        def chosen(name: str | None) -> None:
            if name:
                self.set_value(key, name)

        self.app.push_screen(CatalogPicker(spec.label, self._names.get(spec.catalog, []),
                                           self._values.get(key, "")), chosen)


class CatalogPicker(ModalScreen[str | None]):
    """Search a catalog list: type to filter, Enter or click to choose, Escape to cancel."""

    BINDINGS = [("escape", "dismiss(None)", "Cancel")]

    def __init__(self, title: str, names: list[str], current: str = "") -> None:
        super().__init__()
        self._title = title
        self._names = names
        self._current = current

    def compose(self) -> ComposeResult:
        with Vertical(classes="dialog"):
            yield Label(f"Choose {self._title.lower()}", classes="dialog-title")
            yield Input(placeholder="type to search", id="picker-filter")
            yield OptionList(*self._names, id="picker-list")

    def on_mount(self) -> None:
        self.query_one("#picker-filter", Input).focus()
        if self._current in self._names:
            self.query_one("#picker-list", OptionList).highlighted = self._names.index(self._current)

    def _matches(self, query: str) -> list[str]:
        words = query.lower().split()
        return [n for n in self._names if all(w in n.lower() for w in words)]

    @on(Input.Changed, "#picker-filter")
    def _filter(self, event: Input.Changed) -> None:
        ol = self.query_one("#picker-list", OptionList)
        ol.clear_options()
        ol.add_options(self._matches(event.value))
        if ol.option_count:
            ol.highlighted = 0

    @on(Input.Submitted, "#picker-filter")
    def _submit(self) -> None:
        ol = self.query_one("#picker-list", OptionList)
        if ol.highlighted is not None and ol.option_count:
            self.dismiss(str(ol.get_option_at_index(ol.highlighted).prompt))

    @on(OptionList.OptionSelected)
    def _selected(self, event: OptionList.OptionSelected) -> None:
        self.dismiss(str(event.option.prompt))


class PathPrompt(ModalScreen[str | None]):
    """Ask for a file path (open, save, export); Escape cancels."""

    BINDINGS = [("escape", "dismiss(None)", "Cancel")]

    def __init__(self, title: str, default: str = "", hint: str = "") -> None:
        super().__init__()
        self._title = title
        self._default = default
        self._hint = hint

    def compose(self) -> ComposeResult:
        with Vertical(classes="dialog"):
            yield Label(self._title, classes="dialog-title")
            yield Input(value=self._default, id="path-input")
            if self._hint:
                yield Static(self._hint, classes="dialog-hint")
            with Horizontal(classes="dialog-buttons"):
                yield Button("OK", variant="primary", id="path-ok")
                yield Button("Cancel", id="path-cancel")

    def on_mount(self) -> None:
        self.query_one("#path-input", Input).focus()

    @on(Input.Submitted, "#path-input")
    @on(Button.Pressed, "#path-ok")
    def _ok(self) -> None:
        v = self.query_one("#path-input", Input).value.strip()
        self.dismiss(v or None)

    @on(Button.Pressed, "#path-cancel")
    def _cancel(self) -> None:
        self.dismiss(None)
